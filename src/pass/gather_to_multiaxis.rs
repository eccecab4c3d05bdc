//! The `GatherToMultiaxis` pass: every ONNX `Gather`, `GatherElements` and `GatherND` becomes
//! shape operations around one `multigather.GatherMultiaxis` node.
//!
//! Each rule is the rank-level recipe of [`crate::gather::map::onnx`], the same one the library
//! mappings execute on tensors, turned into nodes:
//!
//! ```text
//! Gather(data, idx, axis=a)           ==> Unsqueeze?(data), Unsqueeze?(idx) -> GatherMultiaxis(axes=[a]) -> Squeeze?
//! GatherElements(data, idx, axis=a)   ==> Slice?(data to idx's sizes off axis a) -> GatherMultiaxis(axes=[a])
//! GatherND(data, idx, batch_dims=b)   ==> Unsqueeze?/Reshape?(idx) -> GatherMultiaxis(axes=[b..b+k)) -> Squeeze?
//! ```
//!
//! The rules need ranks, not sizes. When every dimension of an operand is known, its shape
//! operations collapse into one `Reshape` to a constant shape; otherwise `Unsqueeze` / `Squeeze`
//! (or `Reshape` with `0` / `-1` entries) keep symbolic dimensions symbolic. A node whose ranks
//! cannot be inferred is left as it is and reported with the reason — never guessed.
//!
//! Subgraphs (`If`, `Loop`, `Scan` bodies at any depth) and model-local functions are rewritten
//! too. For a function, the ranks of its inputs come from its call sites, which must agree.
//! New values get `value_info` entries with their type and shape; new names derive from the
//! rewritten node's name; the original output name is kept.

use std::collections::BTreeMap;

use serde::Serialize;

use super::emit::{all_known, Constants, Emitter, Replacement};
use super::walk::{label, walk, Change, Rule, Site};
use super::Pass;
use crate::error::Result;
use crate::gather::map::onnx as rules;
use crate::gather::{GatherPlan, OutOfRange};
use crate::infer::{gather_multiaxis_dims, same_dim, TypeEnv};
use crate::ir::{
    opset_version, AttrValue, Dim, Graph, Model, Node, OpsetImport, StoredTensor, UniqueNames,
};
use crate::DataType;

/// The domain of `GatherMultiaxis`.
pub const DOMAIN: &str = crate::gather::DOMAIN;

/// The three ONNX gathers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum GatherKind {
    Gather,
    GatherElements,
    #[serde(rename = "GatherND")]
    GatherNd,
}

impl GatherKind {
    /// Every kind.
    pub const ALL: [GatherKind; 3] = [
        GatherKind::Gather,
        GatherKind::GatherElements,
        GatherKind::GatherNd,
    ];

    /// The kind of a node of the default domain, if it is a gather.
    pub fn of(node: &Node) -> Option<GatherKind> {
        if !matches!(node.domain.as_str(), "" | "ai.onnx") {
            return None;
        }
        GatherKind::from_name(&node.op_type)
    }

    /// The kind named by an ONNX op type (`Gather`, `GatherElements`, `GatherND`).
    pub fn from_name(name: &str) -> Option<GatherKind> {
        match name {
            "Gather" => Some(GatherKind::Gather),
            "GatherElements" => Some(GatherKind::GatherElements),
            "GatherND" => Some(GatherKind::GatherNd),
            _ => None,
        }
    }

    /// The ONNX op type.
    pub fn name(self) -> &'static str {
        match self {
            GatherKind::Gather => "Gather",
            GatherKind::GatherElements => "GatherElements",
            GatherKind::GatherNd => "GatherND",
        }
    }
}

/// What the pass rewrites.
#[derive(Clone, Debug)]
pub struct RewriteConfig {
    /// The op kinds to rewrite.
    pub kinds: Vec<GatherKind>,
    /// Nodes whose name contains one of these texts are left untouched.
    pub skip: Vec<String>,
}

impl Default for RewriteConfig {
    fn default() -> RewriteConfig {
        RewriteConfig {
            kinds: GatherKind::ALL.to_vec(),
            skip: Vec::new(),
        }
    }
}

/// What happened to one gather node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeReport {
    /// The node's name (or its first output's name when it has none).
    pub node: String,
    pub op: String,
    /// Where the node lives: the main graph's name, `graph/node.attribute` for subgraphs,
    /// `function domain.name` for functions.
    pub scope: String,
    #[serde(flatten)]
    pub outcome: NodeOutcome,
}

/// Rewritten (into which ops) or skipped (and why).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum NodeOutcome {
    Rewritten { into: Vec<String> },
    Skipped { reason: String },
}

/// The pass's report: per node, and counts by op kind.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RewriteReport {
    pub rewritten: usize,
    pub skipped: usize,
    /// `op -> (rewritten, skipped)`.
    pub by_op: BTreeMap<String, (usize, usize)>,
    pub nodes: Vec<NodeReport>,
}

impl RewriteReport {
    fn add(&mut self, entry: NodeReport) {
        let counts = self.by_op.entry(entry.op.clone()).or_default();
        match entry.outcome {
            NodeOutcome::Rewritten { .. } => {
                self.rewritten += 1;
                counts.0 += 1;
            }
            NodeOutcome::Skipped { .. } => {
                self.skipped += 1;
                counts.1 += 1;
            }
        }
        self.nodes.push(entry);
    }

    /// A human summary: one line of counts, then one line per skipped node.
    pub fn summary(&self) -> String {
        let mut s = format!(
            "rewrote {} gather node(s), skipped {}",
            self.rewritten, self.skipped
        );
        for (op, (done, skipped)) in &self.by_op {
            s.push_str(&format!("\n  {op}: {done} rewritten, {skipped} skipped"));
        }
        for n in &self.nodes {
            if let NodeOutcome::Skipped { reason } = &n.outcome {
                s.push_str(&format!(
                    "\n  skipped {} '{}' in {}: {reason}",
                    n.op, n.node, n.scope
                ));
            }
        }
        s
    }
}

/// The pass. See the module documentation.
///
/// # Example
/// ```
/// use multigather::ir::{Dim, Graph, Model, Node, Type, ValueInfo};
/// use multigather::pass::{GatherToMultiaxis, PassManager, RewriteConfig};
/// use multigather::DataType;
///
/// let mut g = Graph::new("main");
/// g.inputs.push(ValueInfo::new("data", Type::tensor(DataType::Float, vec![Dim::Known(4), Dim::Known(3)])));
/// g.inputs.push(ValueInfo::new("idx", Type::tensor(DataType::Int64, vec![Dim::Known(2)])));
/// g.outputs.push(ValueInfo::untyped("out"));
/// g.add_node(Node::new("Gather", "pick", ["data", "idx"], ["out"]));
/// let mut model = Model::new(g, 13);
///
/// let mut pass = GatherToMultiaxis::new(RewriteConfig::default());
/// PassManager::new().run(&mut model, &mut [&mut pass])?;
/// assert_eq!(pass.report().rewritten, 1);
/// assert_eq!(model.op_histogram().get("multigather.GatherMultiaxis"), Some(&1));
/// assert_eq!(model.op_histogram().get("Gather"), None);
/// # Ok::<(), multigather::Error>(())
/// ```
pub struct GatherToMultiaxis {
    config: RewriteConfig,
    report: RewriteReport,
}

impl GatherToMultiaxis {
    /// A pass with the given configuration.
    pub fn new(config: RewriteConfig) -> GatherToMultiaxis {
        GatherToMultiaxis {
            config,
            report: RewriteReport::default(),
        }
    }

    /// The report of the last run.
    pub fn report(&self) -> &RewriteReport {
        &self.report
    }

    /// Runs the pass through a [`super::PassManager`] (so the result is validated) and returns
    /// its report.
    pub fn rewrite(model: &mut Model, config: RewriteConfig) -> Result<RewriteReport> {
        let mut pass = GatherToMultiaxis::new(config);
        super::PassManager::new().run(model, &mut [&mut pass])?;
        Ok(pass.report)
    }
}

impl Pass for GatherToMultiaxis {
    fn name(&self) -> &'static str {
        "GatherToMultiaxis"
    }

    fn run(&mut self, model: &mut Model) -> Result<bool> {
        self.report = RewriteReport::default();
        let mut rule = Rewriter {
            config: &self.config,
            report: &mut self.report,
        };
        let total = walk(model, &mut rule);
        for f in &mut model.functions {
            if uses_domain(&f.body) && opset_version(&f.opset_imports, DOMAIN).is_none() {
                f.opset_imports.push(OpsetImport {
                    domain: Some(DOMAIN.to_owned()),
                    version: crate::gather::SINCE_VERSION,
                });
            }
        }
        if total > 0 {
            model.ensure_opset(DOMAIN, crate::gather::SINCE_VERSION);
        }
        Ok(total > 0)
    }
}

/// True if the graph (or one of its subgraphs) has a node of [`DOMAIN`].
pub(crate) fn uses_domain(graph: &Graph) -> bool {
    graph
        .nodes()
        .any(|(_, n)| n.domain == DOMAIN || n.subgraphs().any(uses_domain))
}

/// The per-node rule of the pass.
struct Rewriter<'a> {
    config: &'a RewriteConfig,
    report: &'a mut RewriteReport,
}

impl Rule for Rewriter<'_> {
    fn visit(&mut self, node: &Node, site: &Site, names: &mut UniqueNames) -> Option<Change> {
        let kind = GatherKind::of(node)?;
        let label = label(node);
        let outcome = if !self.config.kinds.contains(&kind) {
            Err("its op kind is not selected".to_owned())
        } else if let Some(p) = self
            .config
            .skip
            .iter()
            .find(|p| node.name.contains(p.as_str()))
        {
            Err(format!("its name matches the skip pattern '{p}'"))
        } else {
            rewrite_node(
                node,
                kind,
                &label,
                site.env,
                site.opset,
                site.constants,
                names,
            )
        };
        let (outcome, change) = match outcome {
            Ok(replacement) => {
                let into = replacement.nodes.iter().map(Node::qualified_op).collect();
                let change = Change {
                    replacement,
                    output_types: Vec::new(),
                    prune_inputs: false,
                };
                (NodeOutcome::Rewritten { into }, Some(change))
            }
            Err(reason) => (NodeOutcome::Skipped { reason }, None),
        };
        self.report.add(NodeReport {
            node: label,
            op: kind.name().to_owned(),
            scope: site.scope.to_owned(),
            outcome,
        });
        change
    }

    fn skip(&mut self, node: &Node, scope: &str, reason: &str) {
        if let Some(kind) = GatherKind::of(node) {
            self.report.add(NodeReport {
                node: label(node),
                op: kind.name().to_owned(),
                scope: scope.to_owned(),
                outcome: NodeOutcome::Skipped {
                    reason: reason.to_owned(),
                },
            });
        }
    }
}

/// Builds the replacement of one gather node, or says why it cannot.
fn rewrite_node(
    node: &Node,
    kind: GatherKind,
    label: &str,
    env: &TypeEnv,
    opset: i64,
    constants: Constants,
    names: &mut UniqueNames,
) -> std::result::Result<Replacement, String> {
    if constants == Constants::Unavailable {
        return Err(format!(
            "opset {opset} has no int64 Constant and functions have no initializers"
        ));
    }
    let (data, indices) = match node.inputs.as_slice() {
        [d, i] if !d.is_empty() && !i.is_empty() => (d.as_str(), i.as_str()),
        _ => return Err(format!("expected 2 inputs, found {}", node.inputs.len())),
    };
    let output = match node.outputs.as_slice() {
        [o] if !o.is_empty() => o.as_str(),
        _ => return Err(format!("expected 1 output, found {}", node.outputs.len())),
    };
    let known = |name: &str| -> std::result::Result<(DataType, Vec<Dim>), String> {
        let ty = env.get(name);
        let dims = ty
            .and_then(|t| t.shape.as_ref())
            .map(|s| s.dims.clone())
            .ok_or_else(|| format!("the rank of '{name}' is unknown"))?;
        let elem = ty
            .and_then(|t| t.elem)
            .ok_or_else(|| format!("the element type of '{name}' is unknown"))?;
        Ok((elem, dims))
    };
    let (elem, data_dims) = known(data)?;
    let (index_elem, index_dims) = known(indices)?;
    if !index_elem.is_index() {
        return Err(format!(
            "indices '{indices}' are {index_elem}, not int32 or int64"
        ));
    }
    let attr = |name: &str, default: i64| node.attr_int(name, default).map_err(|e| e.to_string());
    let (r, q) = (data_dims.len(), index_dims.len());
    let plan = match kind {
        GatherKind::Gather => rules::gather(r, q, attr("axis", 0)?),
        GatherKind::GatherElements => {
            if r != q {
                return Err(format!("data has rank {r} but indices have rank {q}"));
            }
            rules::gather_elements(r, attr("axis", 0)?)
        }
        GatherKind::GatherNd => {
            let depth = match index_dims.last() {
                Some(Dim::Known(k)) if *k >= 0 => *k as usize,
                Some(_) => return Err(format!("the last dimension of indices '{indices}' (the index depth) is not known statically")),
                None => return Err(format!("indices '{indices}' are a scalar")),
            };
            rules::gather_nd(r, q, depth, attr("batch_dims", 0)?)
        }
    }
    .map_err(|e| e.to_string())?;
    plan.ranks(r, q).map_err(|e| e.to_string())?;

    let mut e = Emitter::new(label, names, opset, constants);
    emit(
        &mut e,
        &plan,
        (data, elem, data_dims),
        (indices, index_elem, index_dims),
        output,
    )?;
    Ok(e.finish())
}

type Operand<'a> = (&'a str, DataType, Vec<Dim>);

fn emit(
    e: &mut Emitter,
    plan: &GatherPlan,
    data: Operand,
    indices: Operand,
    output: &str,
) -> std::result::Result<(), String> {
    let (data, elem, mut data_dims) = data;
    let (indices, index_elem, index_dims) = indices;
    let mut x = data.to_owned();
    if let Some(axis) = plan.crop_input_to_indices {
        if needs_crop(&data_dims, &index_dims, axis) {
            (x, data_dims) = e.crop(&x, elem, &data_dims, indices, &index_dims, axis);
        }
    }
    let (x, x_dims) = e.shape_ops(&plan.input, x, elem, data_dims, "input", None);
    let (i, i_dims) = e.shape_ops(
        &plan.indices,
        indices.to_owned(),
        index_elem,
        index_dims,
        "indices",
        None,
    );
    let gathered_dims = gather_multiaxis_dims(&x_dims, &i_dims, &plan.spec.axes);
    let gathered = if plan.output.is_empty() {
        output.to_owned()
    } else {
        e.value("gathered", elem, &gathered_dims)
    };
    let mut node = Node::new(
        "GatherMultiaxis",
        &e.node_name("GatherMultiaxis"),
        [x, i],
        [gathered.clone()],
    )
    .with_domain(DOMAIN)
    .with_attr(
        "axes",
        AttrValue::Ints(plan.spec.axes.iter().map(|&a| a as i64).collect()),
    );
    if plan.spec.mode != OutOfRange::Error {
        node = node.with_attr(
            "mode",
            AttrValue::String(plan.spec.mode.name().as_bytes().to_vec()),
        );
    }
    e.nodes.push(node);
    e.shape_ops(
        &plan.output,
        gathered,
        elem,
        gathered_dims,
        "output",
        Some(output),
    );
    Ok(())
}

/// True unless every non-axis dimension of the data provably equals the indices' one.
fn needs_crop(data: &[Dim], indices: &[Dim], axis: usize) -> bool {
    data.iter()
        .zip(indices)
        .enumerate()
        .any(|(j, (d, i))| j != axis && !same_dim(d, i))
}

/// The rewrite's own emitter step.
impl Emitter<'_> {
    /// `GatherElements` data cropped to the indices' sizes on every axis but `axis`:
    /// `Slice(data, 0, ends)` with constant ends when the sizes are known, else
    /// `ends = Where(mask, Shape(indices), INT64_MAX)`.
    fn crop(
        &mut self,
        data: &str,
        elem: DataType,
        data_dims: &[Dim],
        indices: &str,
        index_dims: &[Dim],
        axis: usize,
    ) -> (String, Vec<Dim>) {
        let rank = data_dims.len();
        let dims: Vec<Dim> = (0..rank)
            .map(|j| {
                if j == axis {
                    data_dims[j].clone()
                } else {
                    index_dims[j].clone()
                }
            })
            .collect();
        let starts = self.constant("crop_starts", &vec![0; rank]);
        let ends = match all_known(index_dims) {
            Some(sizes) => {
                let ends: Vec<i64> = (0..rank)
                    .map(|j| if j == axis { i64::MAX } else { sizes[j] })
                    .collect();
                self.constant("crop_ends", &ends)
            }
            None => {
                let shape =
                    self.value("indices_shape", DataType::Int64, &[Dim::Known(rank as i64)]);
                let shape_node = self.node_name("Shape_indices");
                self.nodes
                    .push(Node::new("Shape", &shape_node, [indices], [shape.clone()]));
                let mask: Vec<u8> = (0..rank).map(|j| u8::from(j != axis)).collect();
                let tensor = StoredTensor::raw(None, DataType::Bool, &[rank as i64], mask.into());
                let mask_name = self.constant_tensor("crop_mask", tensor);
                let max = self.constant("crop_unbounded", &[i64::MAX]);
                let ends = self.value("crop_ends", DataType::Int64, &[Dim::Known(rank as i64)]);
                let where_node = self.node_name("Where_crop_ends");
                self.nodes.push(Node::new(
                    "Where",
                    &where_node,
                    [mask_name, shape, max],
                    [ends.clone()],
                ));
                ends
            }
        };
        let out = self.value("cropped", elem, &dims);
        let slice = self.node_name("Slice_crop");
        self.nodes.push(Node::new(
            "Slice",
            &slice,
            [data.to_owned(), starts, ends],
            [out.clone()],
        ));
        (out, dims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crop_is_needed_only_when_sizes_may_differ() {
        let s = |x: &str| Dim::Symbolic(x.into());
        assert!(!needs_crop(
            &[s("B"), Dim::Known(5)],
            &[s("B"), Dim::Known(2)],
            1
        ));
        assert!(needs_crop(
            &[s("B"), Dim::Known(5)],
            &[s("K"), Dim::Known(2)],
            1
        ));
        assert!(needs_crop(
            &[Dim::Unknown, Dim::Known(5)],
            &[Dim::Unknown, Dim::Known(2)],
            1
        ));
    }
}
