//! Planning: a graph made into the `Plan` the run loop runs, once per graph, call site and
//! enclosing plan (`Session::plan` caches it).
//!
//! In order: initializers become tensors (sparse ones densified by `sparse_to_tensor`); each
//! node is resolved to a model-local function or a registered operator (an unknown one is
//! reported before anything runs, named by `node_label`), a function body's attribute
//! references bound from the call site (`bind_refs`), its arity checked and its schema's type
//! constraints looked up; the steps whose inputs are all constants are folded
//! (`fold_constants`); unless `RunOptions::unfused`, the fusions of `fuse.rs` rewrite the steps
//! and the folded values no one reads any more are dropped (`fuse::drop_unread`); attributes
//! are prepared and memos given to steps with constant inputs; every value is numbered into a
//! slot of its frame, each input resolved to a slot, a constant or an outer scope's name; and
//! each step is given the slots whose last use it is, and the input it may donate to an
//! in-place kernel.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::fuse;
use super::{at_node, lock, Frame, Plan, Session, Source, Step, StepKind};
use crate::error::{Error, Result};
use crate::ir::{
    display_domain, is_onnx_domain, opset_version, stored_to_tensor, AttrValue, Attribute,
    Function, Graph, Node, OpsetImport, SparseInitializer, Value,
};
use crate::ops::constraints;
use crate::ops::{foldable, registry, value_bytes, Folder, OpDef};
use crate::tensor::Tensor;

impl<'m> Session<'m> {
    /// The plan of `graph` (a function body bound to the call `call`, a subgraph folding with
    /// its enclosing frame `parent`), built on first use and cached for the session's later
    /// runs.
    pub(super) fn plan(
        &self,
        graph: &'m Graph,
        imports: &'m [OpsetImport],
        call: Option<(&'m Node, &'m Function)>,
        parent: Option<&Frame<'_, 'm>>,
    ) -> Result<Arc<Plan<'m>>> {
        let key = (
            graph as *const Graph as usize,
            call.map_or(0, |(n, _)| n as *const Node as usize),
            parent.map_or(0, |f| Arc::as_ptr(&f.plan) as usize),
        );
        if let Some(plan) = lock(&self.plans).get(&key) {
            return Ok(plan.clone());
        }
        let plan = Arc::new(self.build_plan(graph, imports, call, parent)?);
        lock(&self.plans).insert(key, plan.clone());
        Ok(plan)
    }

    /// Builds the plan of `graph`: see the module documentation for its stages.
    fn build_plan(
        &self,
        graph: &'m Graph,
        imports: &'m [OpsetImport],
        call: Option<(&'m Node, &'m Function)>,
        parent: Option<&Frame<'_, 'm>>,
    ) -> Result<Plan<'m>> {
        let mut constants = HashMap::new();
        for t in &graph.initializers {
            if let Some(name) = &t.name {
                constants.insert(name.clone(), stored_to_tensor(t)?);
            }
        }
        for s in &graph.sparse_initializers {
            constants.insert(s.name.clone(), sparse_to_tensor(s)?);
        }
        let mut steps = Vec::with_capacity(graph.node_count());
        for (position, (_, node)) in graph.nodes().enumerate() {
            let node = match call {
                Some((site, f)) if has_refs(node) => Cow::Owned(bind_refs(node, site, f)?),
                _ => Cow::Borrowed(node),
            };
            let (kind, opset) = self.resolve(&node, imports, (graph, position))?;
            let mut schema = None;
            if let StepKind::Op(def) = kind {
                def.check_arity(&node)?;
                schema = constraints::lookup(&node.domain, &node.op_type, opset);
            }
            steps.push(Step::new(node, kind, opset, schema));
        }
        if steps.len() != graph.node_count() {
            return Err(Error::InvalidGraph {
                graph: graph.name.clone(),
                reason: "the nodes form a cycle".into(),
            });
        }
        let initial: HashSet<String> = constants.keys().cloned().collect();
        let (steps, mut fixed) = {
            let mut folded = lock(&self.folded);
            let budget = self.folding_budget();
            fold_constants(graph, steps, &mut constants, parent, &mut folded, budget)
        };
        let steps = match self.options.unfused {
            true => steps,
            false => {
                let folds: Vec<String> = constants
                    .keys()
                    .filter(|name| !initial.contains(*name))
                    .cloned()
                    .collect();
                let steps = fuse::fuse(graph, steps, &mut constants, &mut fixed);
                let mut folded = lock(&self.folded);
                fuse::drop_unread(
                    graph,
                    &steps,
                    folds,
                    &mut constants,
                    &mut fixed,
                    &mut folded,
                );
                steps
            }
        };
        let mut steps = steps;
        // Attributes are parsed once the steps are final (fusion rewrites some nodes).
        for step in &mut steps {
            let memo = crate::ops::Memo::new(step.node.inputs.iter().map(|i| fixed.contains(i)));
            step.memo = memo.any().then_some(memo);
            if let StepKind::Op(OpDef {
                prepare: Some(prepare),
                ..
            }) = step.kind
            {
                let prepared =
                    prepare(&step.node, step.opset).map_err(|e| at_node(&step.node, e))?;
                step.prepared = Some(prepared);
            }
        }
        // Slots: graph inputs first (in order), then every output of a step.
        let mut slots: HashMap<String, usize> = HashMap::new();
        let mut input_slots = Vec::with_capacity(graph.inputs.len());
        for v in &graph.inputs {
            let next = slots.len();
            input_slots.push(*slots.entry(v.name.clone()).or_insert(next));
        }
        for step in &steps {
            for o in &step.node.outputs {
                if !o.is_empty() && !slots.contains_key(o) {
                    slots.insert(o.clone(), slots.len());
                }
            }
        }
        let source = |name: &String| {
            if name.is_empty() {
                Source::Omitted
            } else if let Some(&slot) = slots.get(name) {
                Source::Slot(slot)
            } else if let Some(t) = constants.get(name) {
                Source::Constant(Value::Tensor(t.clone()))
            } else {
                Source::Outer(name.clone())
            }
        };
        for step in &mut steps {
            step.inputs = step.node.inputs.iter().map(source).collect();
            step.outputs = step
                .node
                .outputs
                .iter()
                .map(|o| slots.get(o).copied())
                .collect();
        }
        // Slots freed after their last use, unless they are graph outputs.
        let mut freeable = vec![true; slots.len()];
        for o in &graph.outputs {
            if let Some(&slot) = slots.get(&o.name) {
                freeable[slot] = false;
            }
        }
        let mut last_use: Vec<Option<usize>> = vec![None; slots.len()];
        for (i, step) in steps.iter().enumerate() {
            for input in &step.inputs {
                if let Source::Slot(slot) = input {
                    last_use[*slot] = Some(i);
                }
            }
            // Values the node's subgraphs read from this scope live until the node has run.
            if step.node.subgraphs().next().is_some() {
                for name in step.node.uses() {
                    if let Some(&slot) = slots.get(&name) {
                        last_use[slot] = Some(i);
                    }
                }
            }
            // Outputs nothing reads are freed right after the step that makes them.
            for &slot in step.outputs.iter().flatten() {
                last_use[slot].get_or_insert(i);
            }
        }
        let unused_inputs = input_slots
            .iter()
            .copied()
            .filter(|&slot| freeable[slot] && last_use[slot].is_none())
            .collect();
        for (slot, used) in last_use.into_iter().enumerate() {
            if let Some(i) = used.filter(|_| freeable[slot]) {
                steps[i].frees.push(slot);
            }
        }
        for step in &mut steps {
            step.donates = match (&step.kind, step.inputs.as_slice()) {
                (StepKind::Op(def), [Source::Slot(slot), rest @ ..])
                    if def.in_place.is_some()
                        && step.frees.contains(slot)
                        && !rest
                            .iter()
                            .any(|s| matches!(s, Source::Slot(o) if o == slot))
                        && step.node.subgraphs().next().is_none() =>
                {
                    Some(*slot)
                }
                _ => None,
            };
        }
        let variables = graph
            .inputs
            .iter()
            .map(|v| &v.name)
            .chain(steps.iter().flat_map(|s| &s.node.outputs))
            .chain(constants.keys().filter(|name| !fixed.contains(*name)))
            .cloned()
            .collect();
        let constants = constants
            .into_iter()
            .map(|(name, t)| (name, Value::Tensor(t)))
            .collect();
        Ok(Plan {
            steps,
            constants,
            slots,
            input_slots,
            unused_inputs,
            fixed,
            variables,
        })
    }

    /// What runs a node: a model-local function or a registered operator, with the opset
    /// version of the node's domain. `at` is the node's graph and position there, for the
    /// message about an operator this build lacks.
    pub(super) fn resolve(
        &self,
        node: &Node,
        imports: &[OpsetImport],
        at: (&Graph, usize),
    ) -> Result<(StepKind<'m>, i64)> {
        let opset = opset_version(imports, &node.domain)
            .or_else(|| opset_version(&self.model.opset_imports, &node.domain));
        if !crate::ops::is_multiaxis(&node.domain, &node.op_type) {
            if let Some(f) = self
                .model
                .functions
                .iter()
                .find(|f| f.key() == node.call_key())
            {
                // A local function named like a standard operator of the node's opset: ONNX's
                // inliner calls the function, onnxruntime runs the operator. The model has two
                // meanings, and a run could only prove one of them.
                let standard = is_onnx_domain(&node.domain) || node.domain == "ai.onnx.ml";
                if let Some(v) = opset.filter(|_| standard) {
                    if registry().lookup(&node.domain, &node.op_type, v).is_some() {
                        return Err(Error::node(
                            &node.name,
                            &node.op_type,
                            format!(
                                "calls the model-local function '{}' of domain {}, which has the \
                                 name of a standard operator of opset {v}: onnxruntime runs the \
                                 operator and ONNX's inliner the function; rename the function",
                                f.name,
                                display_domain(&f.domain)
                            ),
                        ));
                    }
                }
                return Ok((StepKind::Call(f), opset.unwrap_or(0)));
            }
        }
        let Some(opset) = opset else {
            return Err(Error::node(
                &node.name,
                &node.op_type,
                format!("no opset is imported for domain '{}'", node.domain),
            ));
        };
        match registry().lookup(&node.domain, &node.op_type, opset) {
            Some(def) => Ok((StepKind::Op(def), opset)),
            None => Err(Error::Unsupported(format!(
                "operator {} ({}, opset {opset}) at {}",
                node.op_type,
                display_domain(&node.domain),
                node_label(node, at.0, at.1)
            ))),
        }
    }
}

/// Runs, once, the steps whose inputs are all constants (initializers of the graph that no input
/// can override, constants of the same kind in the enclosing scopes that nothing hides, and the
/// outputs of steps folded before), as a runtime folds constants: their outputs join
/// `constants` and the steps leave the plan. Weights stored as `Constant` nodes or computed in
/// the graph (`ConstantOfShape` and arithmetic on it), and the shape arithmetic and weight
/// slicing on them, then cost nothing per run. What is folded is bounded by the session's
/// folding budget, not per value: `folded` counts the values and bytes folded so far against
/// `budget`. The same kernels compute the same values, only earlier, so results do not change.
/// A step that fails stays in the plan, to report its error when the graph runs. Returns the
/// remaining steps and the names of the constants that are fixed.
fn fold_constants<'m>(
    graph: &Graph,
    steps: Vec<Step<'m>>,
    constants: &mut HashMap<String, Tensor>,
    parent: Option<&Frame<'_, 'm>>,
    folded: &mut (usize, usize),
    budget: usize,
) -> (Vec<Step<'m>>, HashSet<String>) {
    // Names bound at run time, or bound twice, are not constants.
    let mut produced: HashMap<String, usize> = HashMap::new();
    for step in &steps {
        for o in &step.node.outputs {
            *produced.entry(o.clone()).or_default() += 1;
        }
    }
    let variable = |name: &str| {
        graph.inputs.iter().any(|v| v.name == name) || produced.get(name).is_some_and(|&n| n > 1)
    };
    let mut fixed: HashSet<String> = constants
        .keys()
        .filter(|name| !variable(name) && !produced.contains_key(*name))
        .cloned()
        .collect();
    // Names this graph defines hide those of the enclosing scopes.
    let local: HashSet<String> = graph
        .inputs
        .iter()
        .map(|v| v.name.clone())
        .chain(constants.keys().cloned())
        .chain(produced.keys().cloned())
        .collect();
    let mut kept = Vec::with_capacity(steps.len());
    for step in steps {
        let def = match step.kind {
            StepKind::Op(def) => def,
            StepKind::Call(_) => {
                kept.push(step);
                continue;
            }
        };
        let node: &Node = &step.node;
        let eligible = foldable(node)
            && node
                .outputs
                .iter()
                .all(|o| !o.is_empty() && !variable(o) && !constants.contains_key(o));
        let resolve = |name: &String| -> Option<Option<&Tensor>> {
            if name.is_empty() {
                Some(None)
            } else if fixed.contains(name) {
                constants.get(name).map(Some)
            } else if local.contains(name) {
                None
            } else {
                outer_constant(parent, name).map(Some)
            }
        };
        let inputs: Option<Vec<Option<&Tensor>>> = if eligible {
            node.inputs.iter().map(resolve).collect()
        } else {
            None
        };
        let Some(inputs) = inputs else {
            kept.push(step);
            continue;
        };
        // A step its schema's type constraints refuse stays, to report that when it runs.
        if step.check_types(&inputs).is_err() {
            kept.push(step);
            continue;
        }
        let room = Folder {
            max_bytes: budget.saturating_sub(folded.1),
        };
        let Some(values) = room.fold(def, node, step.opset, &inputs) else {
            kept.push(step);
            continue;
        };
        folded.0 += values.len();
        folded.1 = values
            .iter()
            .fold(folded.1, |sum, t| sum.saturating_add(value_bytes(t)));
        for (name, t) in node.outputs.iter().zip(values) {
            fixed.insert(name.clone());
            constants.insert(name.clone(), t);
        }
    }
    (kept, fixed)
}

/// The fixed constant `name` of the nearest enclosing scope that defines it, if that scope
/// holds it as a fixed constant.
fn outer_constant<'a>(mut frame: Option<&'a Frame<'_, '_>>, name: &str) -> Option<&'a Tensor> {
    while let Some(f) = frame {
        if f.plan.fixed.contains(name) {
            return f.plan.constants.get(name).and_then(Value::as_tensor);
        }
        if f.plan.variables.contains(name) {
            return None;
        }
        frame = f.parent;
    }
    None
}

/// How messages name a node: `node 'name'`, or for an unnamed one its position in its graph's
/// node list (from 0, file order) and its first output.
fn node_label(node: &Node, graph: &Graph, position: usize) -> String {
    if !node.name.is_empty() {
        return format!("node '{}'", node.name);
    }
    let output = match node.outputs.first() {
        Some(out) if !out.is_empty() => format!(", producing '{out}'"),
        _ => String::new(),
    };
    format!("unnamed node #{position} of graph '{}'{output}", graph.name)
}

fn has_refs(node: &Node) -> bool {
    node.attributes
        .iter()
        .any(|a| matches!(a.value, AttrValue::Ref { .. }))
}

/// A copy of a function-body node with its attribute references replaced by the call site's
/// attributes, or the function's defaults; references to attributes neither gives are dropped
/// (the attribute is then absent, as ONNX specifies).
fn bind_refs(node: &Node, site: &Node, f: &Function) -> Result<Node> {
    let mut bound = node.clone();
    let mut attributes = Vec::with_capacity(node.attributes.len());
    for a in &node.attributes {
        match &a.value {
            AttrValue::Ref { name, .. } => {
                let value = site
                    .attributes
                    .iter()
                    .chain(&f.attribute_defaults)
                    .find(|b| &b.name == name)
                    .map(|b| b.value.clone());
                if let Some(value) = value {
                    attributes.push(Attribute {
                        name: a.name.clone(),
                        value,
                        doc_string: a.doc_string.clone(),
                    });
                }
            }
            _ => attributes.push(a.clone()),
        }
    }
    bound.attributes = attributes;
    Ok(bound)
}

/// A sparse initializer as a dense runtime tensor: zeros (empty strings) everywhere but at its
/// indices, which are linear positions (`[NNZ]`) or coordinates (`[NNZ, rank]`), each checked
/// against the dims. The model keeps the sparse form; only the interpreter sees it dense.
///
/// # Example
/// ```
/// use multigather::interp::sparse_to_tensor;
/// use multigather::ir::SparseInitializer;
/// // A 2x3 float tensor with 5.0 at linear position 4, encoded as a `SparseTensorProto`:
/// // values (field 1) = TensorProto{dims [1], float, float_data [5.0]}, indices (field 2) =
/// // TensorProto{dims [1], int64, int64_data [4]}, dims (field 3) = [2, 3].
/// let values = [0x08, 0x01, 0x10, 0x01, 0x22, 0x04, 0x00, 0x00, 0xa0, 0x40, 0x42, 0x01, b'w'];
/// let indices = [0x08, 0x01, 0x10, 0x07, 0x3a, 0x01, 0x04];
/// let mut encoded = vec![0x0a, values.len() as u8];
/// encoded.extend(values);
/// encoded.extend([0x12, indices.len() as u8]);
/// encoded.extend(indices);
/// encoded.extend([0x1a, 0x02, 0x02, 0x03]);
/// let sparse = SparseInitializer { name: "w".into(), dims: vec![2, 3], encoded: encoded.into() };
/// let dense = sparse_to_tensor(&sparse)?;
/// assert_eq!(dense.as_slice::<f32>()?, &[0.0, 0.0, 0.0, 0.0, 5.0, 0.0]);
/// # Ok::<(), multigather::Error>(())
/// ```
pub fn sparse_to_tensor(s: &SparseInitializer) -> Result<Tensor> {
    let bad = |reason: String| Error::tensor(&s.name, format!("sparse initializer: {reason}"));
    let (values, indices) = crate::proto::decode_sparse(&s.encoded)?;
    let values = stored_to_tensor(&values)?;
    let indices = stored_to_tensor(&indices)?;
    let dims: Vec<usize> = s
        .dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| bad(format!("negative dims {:?}", s.dims)))?;
    let nnz = values.len();
    if values.rank() != 1 {
        return Err(bad(format!(
            "values of shape {:?} are not 1-D",
            values.shape()
        )));
    }
    let coordinates = match indices.shape() {
        [n] if *n == nnz => false,
        [n, r] if *n == nnz && *r == dims.len() => true,
        other => {
            return Err(bad(format!(
                "indices of shape {other:?} for {nnz} values of a rank-{} tensor",
                dims.len()
            )))
        }
    };
    let mut dense = Tensor::zeros(values.dtype(), &dims).map_err(|e| bad(e.to_string()))?;
    let len = dense.len();
    for k in 0..nnz {
        let position = if coordinates {
            let mut p = 0usize;
            for (axis, &d) in dims.iter().enumerate() {
                let c = indices.index_at(k * dims.len() + axis)?;
                let c = usize::try_from(c).ok().filter(|&c| c < d).ok_or_else(|| {
                    bad(format!(
                        "index {c} is out of range for dim {axis} of size {d}"
                    ))
                })?;
                p = p * d + c;
            }
            p
        } else {
            let i = indices.index_at(k)?;
            usize::try_from(i)
                .ok()
                .filter(|&i| i < len)
                .ok_or_else(|| bad(format!("index {i} is out of range for {len} elements")))?
        };
        dense.copy_element_from(position, &values, k)?;
    }
    Ok(dense)
}
