//! Passes over a model and the manager that runs them.
//!
//! A [`Pass`] has a name and edits a [`Model`] in memory, reporting whether it changed anything.
//! The [`PassManager`] runs passes in order and validates the model after each one (an invalid
//! result is the pass's bug, reported with its name). Passes do no file I/O.
//!
//! A pass that replaces nodes one at a time is a [`Rule`] run by a [`RulePass`]: the walk visits
//! the main graph, the subgraphs of `If` / `Loop` / `Scan` at any depth and the model-local
//! functions, types each graph, hands the rule a [`Site`] (the node, its graph, the types known
//! there, where it is) and applies the [`Change`] it returns. This crate's
//! [`GatherToMultiaxis`], [`LowerMultiaxis`] and [`DefineMultiaxisFunctions`] are such rules
//! with a report.

mod emit;
mod function_body;
mod gather_to_multiaxis;
mod lower;
mod rule;
mod walk;

/// The gather family, whose home is [`crate::ops::GatherKind`]: the rewrite's
/// [`RewriteConfig::kinds`] are its ONNX kinds.
pub use crate::ops::GatherKind;
pub use function_body::{DefineMultiaxisFunctions, FunctionReport};
pub use gather_to_multiaxis::{
    GatherToMultiaxis, NodeOutcome, NodeReport, RewriteConfig, RewriteReport,
};
pub use lower::{LowerConfig, LowerMultiaxis, LowerReport, Pattern};
pub use rule::{Change, Rule, Site};
pub use walk::RulePass;

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
    /// A short name used in errors.
    fn name(&self) -> &'static str;
    /// Runs the pass; returns whether the model changed.
    fn run(&mut self, model: &mut Model) -> Result<bool>;
}

/// Runs `pass` alone through a [`PassManager`], so the result is validated.
fn run_alone(pass: &mut dyn Pass, model: &mut Model) -> Result<()> {
    PassManager::new().run(model, &mut [pass]).map(drop)
}

/// Runs passes in order and validates the model after each. The caller keeps the passes, so it
/// can read what they report afterwards.
#[derive(Default)]
pub struct PassManager {}

impl PassManager {
    /// An empty pipeline.
    pub fn new() -> PassManager {
        PassManager::default()
    }

    /// Runs `passes` in order; returns each pass's name and whether it changed the model.
    pub fn run(
        &mut self,
        model: &mut Model,
        passes: &mut [&mut dyn Pass],
    ) -> Result<Vec<(&'static str, bool)>> {
        let mut results = Vec::new();
        for pass in passes.iter_mut() {
            let name = pass.name();
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
            results.push((name, changed));
        }
        Ok(results)
    }
}
