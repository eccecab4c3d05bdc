//! Passes over a model and the manager that runs them.
//!
//! A [`Pass`] has a name and edits a [`Model`] in memory, reporting whether it changed anything.
//! The [`PassManager`] runs passes in order, validates the model after each one (an invalid result
//! is the pass's bug, reported with its name), and can dump the model around each pass or stop
//! after the N-th for bisecting. Passes do no file I/O.

mod emit;
mod function_body;
mod gather_to_multiaxis;
mod lower;
mod walk;

/// The gather family, whose home is [`crate::ops::GatherKind`]: the rewrite's
/// [`RewriteConfig::kinds`] are its ONNX kinds.
pub use crate::ops::GatherKind;
pub use function_body::{DefineMultiaxisFunctions, FunctionReport};
pub use gather_to_multiaxis::{
    GatherToMultiaxis, NodeOutcome, NodeReport, RewriteConfig, RewriteReport,
};
pub use lower::{LowerConfig, LowerMultiaxis, LowerReport, Pattern};

use crate::error::{Error, Result};
use crate::ir::Model;

/// Rewrites a copy of `model` and returns the unified diff of its text form before and after
/// ([`crate::text::model_diff`]): what `multigather rewrite --diff` prints, for snapshot tests of
/// what the rewrite does to a model.
///
/// # Example
/// ```
/// use multigather::ir::{AttrValue, Dim, Graph, Model, Node, StoredTensor, Type, ValueInfo};
/// use multigather::pass::{rewrite_diff, RewriteConfig};
/// use multigather::DataType;
/// let mut g = Graph::new("main");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Known(3), Dim::Known(4)])));
/// g.outputs.push(ValueInfo::untyped("y"));
/// g.initializers.push(StoredTensor::from_i64s(Some("i"), &[2], &[2, 0]));
/// g.add_node(Node::new("Gather", "g", ["x", "i"], ["y"]).with_attr("axis", AttrValue::Int(1)));
/// let diff = rewrite_diff(&Model::new(g, 13), RewriteConfig::default())?;
/// assert!(diff.contains("\n-   [g] y = Gather <axis: int = 1> (x, i)\n"));
/// assert!(diff.contains("multigather.GatherMultiaxis"));
/// // Something like this in a user's test, reviewed with `cargo insta review`:
/// // insta::assert_snapshot!(diff);
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn rewrite_diff(model: &Model, config: RewriteConfig) -> Result<String> {
    let mut rewritten = model.clone();
    GatherToMultiaxis::rewrite(&mut rewritten, config)?;
    Ok(crate::text::model_diff(model, &rewritten))
}

/// A transformation of a model.
///
/// # Example
/// A custom pass that renames the graph, run through the manager:
/// ```
/// use multigather::ir::{Graph, Model};
/// use multigather::pass::{Pass, PassManager};
///
/// struct Rename;
/// impl Pass for Rename {
///     fn name(&self) -> &'static str { "Rename" }
///     fn run(&mut self, model: &mut Model) -> multigather::Result<bool> {
///         let changed = model.graph.name != "renamed";
///         model.graph.name = "renamed".into();
///         Ok(changed)
///     }
/// }
///
/// let mut model = Model::new(Graph::new("g"), 13);
/// let mut pm = PassManager::new();
/// assert_eq!(pm.run(&mut model, &mut [&mut Rename])?, vec![("Rename", true)]);
/// assert_eq!(pm.run(&mut model, &mut [&mut Rename])?, vec![("Rename", false)]);
/// # Ok::<(), multigather::Error>(())
/// ```
pub trait Pass {
    /// A short name used in errors and dumps.
    fn name(&self) -> &'static str;
    /// Runs the pass; returns whether the model changed.
    fn run(&mut self, model: &mut Model) -> Result<bool>;
}

/// A pass of this crate: its configuration and the report of its last run.
/// [`GatherToMultiaxis`], [`LowerMultiaxis`] and [`DefineMultiaxisFunctions`] are this struct
/// with their own report (and, for the rewrite, its configuration); each implements [`Pass`] and
/// runs alone, validated, through [`ReportingPass::run_alone`].
///
/// # Example
/// ```
/// use multigather::ir::{Graph, Model};
/// use multigather::pass::LowerMultiaxis;
/// let mut model = Model::new(Graph::new("g"), 13);
/// let report = LowerMultiaxis::new().run_alone(&mut model)?;
/// assert_eq!((report.lowered, report.skipped), (0, 0));
/// # Ok::<(), multigather::Error>(())
/// ```
#[derive(Default)]
pub struct ReportingPass<R, C = ()> {
    config: C,
    report: R,
}

impl<R: Default> ReportingPass<R> {
    /// A pass that takes no configuration.
    pub fn new() -> ReportingPass<R> {
        ReportingPass::default()
    }
}

impl<R, C> ReportingPass<R, C> {
    /// The report of the last run.
    pub fn report(&self) -> &R {
        &self.report
    }
}

impl<R, C> ReportingPass<R, C>
where
    ReportingPass<R, C>: Pass,
{
    /// Runs this pass alone through a [`PassManager`] (so the result is validated) and returns
    /// its report.
    pub fn run_alone(mut self, model: &mut Model) -> Result<R> {
        PassManager::new().run(model, &mut [&mut self])?;
        Ok(self.report)
    }
}

/// Called with the pass name, `"before"` or `"after"`, and the model.
pub type DumpHook = Box<dyn FnMut(&str, &str, &Model)>;

/// Runs passes in order and validates the model after each. The caller keeps the passes, so it
/// can read what they report afterwards.
#[derive(Default)]
pub struct PassManager {
    stop_after: Option<usize>,
    dump: Option<DumpHook>,
}

impl PassManager {
    /// An empty pipeline.
    pub fn new() -> PassManager {
        PassManager::default()
    }

    /// Runs only the first `n` passes.
    pub fn stop_after(&mut self, n: usize) -> &mut PassManager {
        self.stop_after = Some(n);
        self
    }

    /// Calls `hook` before and after each pass (e.g. to print the text form).
    pub fn on_dump(&mut self, hook: impl FnMut(&str, &str, &Model) + 'static) -> &mut PassManager {
        self.dump = Some(Box::new(hook));
        self
    }

    /// Runs `passes` in order; returns each pass's name and whether it changed the model.
    pub fn run(
        &mut self,
        model: &mut Model,
        passes: &mut [&mut dyn Pass],
    ) -> Result<Vec<(&'static str, bool)>> {
        let limit = self.stop_after.unwrap_or(usize::MAX);
        let mut results = Vec::new();
        for pass in passes.iter_mut().take(limit) {
            let name = pass.name();
            if let Some(hook) = &mut self.dump {
                hook(name, "before", model);
            }
            let wrap = |e: Error| Error::Pass {
                pass: name,
                cause: Box::new(e),
            };
            let changed = pass.run(model).map_err(wrap)?;
            model.validate().map_err(|e| Error::Pass {
                pass: name,
                cause: Box::new(Error::InvalidModel(format!(
                    "the pass left an invalid model: {e}"
                ))),
            })?;
            if let Some(hook) = &mut self.dump {
                hook(name, "after", model);
            }
            results.push((name, changed));
        }
        Ok(results)
    }
}
