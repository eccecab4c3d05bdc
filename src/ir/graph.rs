//! The computation graph: nodes in a petgraph `StableGraph` (a slab whose indices stay valid),
//! with the editing primitives passes use.
//!
//! Values are identified by name, as in ONNX. The graph keeps two indexes up to date on every edit
//! — which node produces a value, and which nodes use it (including uses from inside their
//! subgraphs) — and they are its edges: no edge is stored, so adding or removing a node costs the
//! names it reads and writes, whatever else reads them. The node order is not stored:
//! it is recomputed by a topological sort that prefers each node's *position key*, so a graph read
//! from a file in topological order is written back in exactly that order, and nodes that replace
//! another one take its place.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashSet};

use bytes::Bytes;
use petgraph::stable_graph::{NodeIndex, StableGraph};
use petgraph::visit::NodeIndexable;

use super::{canonical_domain, AttrValue, Attribute, NameMap, StoredTensor, ValueInfo};

/// The names defined in one scope of a graph being checked, borrowed from it.
pub(crate) type LocalNames<'a> = HashSet<&'a str, foldhash::fast::RandomState>;
use crate::error::{Error, Result};

/// A node's index in its graph. Stays valid while other nodes are added or removed.
pub type NodeId = NodeIndex<u32>;

/// One operator application (`NodeProto`).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Node {
    pub name: String,
    pub op_type: String,
    /// The operator domain; `""` is the default ONNX domain.
    pub domain: String,
    pub overload: Option<String>,
    /// Input value names in order; `""` marks an omitted optional input.
    pub inputs: Vec<String>,
    /// Output value names in order; `""` marks an omitted optional output.
    pub outputs: Vec<String>,
    /// Attributes in file order.
    pub attributes: Vec<Attribute>,
    pub doc_string: Option<String>,
    pub metadata_props: Vec<(String, String)>,
    /// `device_configurations`, kept encoded for a lossless round trip.
    pub device_configurations: Vec<Bytes>,
    /// Which of `name` and `domain` the file set explicitly to `""` (bits 0 and 1), so an empty
    /// value written out stays set.
    pub(crate) explicit_empty: u8,
}

impl Node {
    /// A node of the default domain.
    ///
    /// # Example
    /// ```
    /// use multigather::ir::Node;
    /// let n = Node::new("Relu", "relu_0", ["x"], ["y"]);
    /// assert_eq!(n.op_type, "Relu");
    /// assert_eq!(n.inputs, vec!["x".to_string()]);
    /// ```
    pub fn new<I, O>(op_type: &str, name: &str, inputs: I, outputs: O) -> Node
    where
        I: IntoIterator,
        I::Item: Into<String>,
        O: IntoIterator,
        O::Item: Into<String>,
    {
        Node {
            name: name.to_owned(),
            op_type: op_type.to_owned(),
            inputs: inputs.into_iter().map(Into::into).collect(),
            outputs: outputs.into_iter().map(Into::into).collect(),
            ..Node::default()
        }
    }

    /// Sets the domain (builder style).
    pub fn with_domain(mut self, domain: &str) -> Node {
        self.domain = domain.to_owned();
        self
    }

    /// Adds an attribute (builder style).
    pub fn with_attr(mut self, name: &str, value: AttrValue) -> Node {
        self.attributes.push(Attribute::new(name, value));
        self
    }

    /// `op_type` prefixed by its domain when the domain is not the default one.
    pub fn qualified_op(&self) -> String {
        match canonical_domain(&self.domain) {
            "" => self.op_type.clone(),
            d => format!("{d}.{}", self.op_type),
        }
    }

    /// Subgraphs held by the node's attributes, in attribute order.
    pub fn subgraphs(&self) -> impl Iterator<Item = &Graph> {
        self.attributes.iter().flat_map(|a| match &a.value {
            AttrValue::Graph(g) => std::slice::from_ref(g.as_ref()),
            AttrValue::Graphs(gs) => gs.as_slice(),
            _ => &[],
        })
    }

    /// Mutable access to the node's subgraphs.
    pub fn subgraphs_mut(&mut self) -> impl Iterator<Item = &mut Graph> {
        self.attributes.iter_mut().flat_map(|a| match &mut a.value {
            AttrValue::Graph(g) => std::slice::from_mut(g.as_mut()),
            AttrValue::Graphs(gs) => gs.as_mut_slice(),
            _ => &mut [],
        })
    }

    /// Names the node reads: its inputs and the outer-scope values its subgraphs use.
    pub fn uses(&self) -> BTreeSet<String> {
        let mut names: BTreeSet<String> = self
            .inputs
            .iter()
            .filter(|n| !n.is_empty())
            .cloned()
            .collect();
        for g in self.subgraphs() {
            names.extend(g.outer_references());
        }
        names
    }
}

/// A quantization annotation of a graph (`TensorAnnotation`).
#[derive(Clone, Debug, PartialEq)]
pub struct QuantAnnotation {
    pub tensor_name: String,
    pub params: Vec<(String, String)>,
}

/// A sparse initializer, kept encoded; `name` is the name of the value it defines.
#[derive(Clone, Debug, PartialEq)]
pub struct SparseInitializer {
    pub name: String,
    pub dims: Vec<i64>,
    pub encoded: Bytes,
}

/// Position key used to order nodes: the position of the node the node stands for, then the order
/// of insertion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Position {
    anchor: u64,
    seq: u64,
}

#[derive(Clone, Debug)]
struct Slot {
    node: Node,
    position: Position,
    /// Names this node reads (inputs and subgraph outer references), as registered in `users`.
    uses: BTreeSet<String>,
    /// Names this node was registered as the producer of.
    defines: Vec<String>,
}

/// A graph (`GraphProto`): the main graph, a subgraph of an `If`/`Loop`/`Scan`, or a function body.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    pub doc_string: Option<String>,
    pub inputs: Vec<ValueInfo>,
    pub outputs: Vec<ValueInfo>,
    pub value_info: Vec<ValueInfo>,
    pub initializers: Vec<StoredTensor>,
    pub sparse_initializers: Vec<SparseInitializer>,
    pub quantization_annotations: Vec<QuantAnnotation>,
    pub metadata_props: Vec<(String, String)>,
    dag: StableGraph<Slot, ()>,
    producer: NameMap<NodeId>,
    users: NameMap<BTreeSet<NodeId>>,
    next_anchor: u64,
    next_seq: u64,
    /// The node order and whether it is complete, computed on first use after an edit: passes
    /// and the checks ask for it many times between edits.
    order: std::sync::OnceLock<(Vec<NodeId>, bool)>,
}

impl PartialEq for Graph {
    /// Graphs are equal when their declarations are equal and they hold equal nodes in the same
    /// order; node indices do not matter.
    fn eq(&self, other: &Graph) -> bool {
        self.name == other.name
            && self.doc_string == other.doc_string
            && self.inputs == other.inputs
            && self.outputs == other.outputs
            && self.value_info == other.value_info
            && self.initializers == other.initializers
            && self.sparse_initializers == other.sparse_initializers
            && self.quantization_annotations == other.quantization_annotations
            && self.metadata_props == other.metadata_props
            && self
                .nodes()
                .map(|(_, n)| n)
                .eq(other.nodes().map(|(_, n)| n))
    }
}

impl Graph {
    /// An empty graph with the given name.
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            ..Graph::default()
        }
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.dag.node_count()
    }

    /// The node at `id`. Panics on an id of another graph, like indexing a slice.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.dag[id].node
    }

    /// The node at `id`, if it exists.
    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.dag.node_weight(id).map(|s| &s.node)
    }

    /// Mutable access to a node. The graph's indexes are brought up to date when the guard drops,
    /// so inputs, outputs and subgraphs may be edited freely through it.
    pub fn node_mut(&mut self, id: NodeId) -> NodeMut<'_> {
        NodeMut { graph: self, id }
    }

    /// The nodes in execution order: a topological order that keeps the file's order where the
    /// graph was read from a file. Nodes on a cycle are left out; [`Graph::validate`] reports them.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node)> + '_ {
        self.order().0.iter().map(|&id| (id, self.node(id)))
    }

    /// Node ids in execution order (see [`Graph::nodes`]).
    pub fn node_ids(&self) -> Vec<NodeId> {
        self.order().0.clone()
    }

    /// The node order (see [`Graph::sort`]), cached until the next edit.
    fn order(&self) -> &(Vec<NodeId>, bool) {
        self.order.get_or_init(|| self.sort())
    }

    /// Kahn's algorithm, choosing the ready node with the smallest position first. Returns the
    /// order and whether every node was placed (false on a cycle).
    ///
    /// A node depends on the producer of every name it uses (`uses`, registered in `users`),
    /// counted once per name: placing a producer releases each user once per name it defines
    /// that the user reads. The dependencies come from the `producer` / `users` maps rather than
    /// stored edges, so removing a node never walks another node's edge list (a value read by
    /// N nodes made removing them quadratic).
    fn sort(&self) -> (Vec<NodeId>, bool) {
        let bound = self.dag.node_bound();
        let mut pending = vec![0usize; bound];
        let mut ready = BinaryHeap::new();
        for id in self.dag.node_indices() {
            let count = self.dag[id]
                .uses
                .iter()
                .filter(|name| self.producer.get(*name).is_some_and(|&p| p != id))
                .count();
            pending[id.index()] = count;
            if count == 0 {
                ready.push(std::cmp::Reverse((self.dag[id].position, id)));
            }
        }
        let mut out = Vec::with_capacity(self.dag.node_count());
        while let Some(std::cmp::Reverse((_, id))) = ready.pop() {
            out.push(id);
            for name in &self.dag[id].defines {
                for &s in self.users.get(name).into_iter().flatten() {
                    if s == id {
                        continue;
                    }
                    let count = &mut pending[s.index()];
                    *count -= 1;
                    if *count == 0 {
                        ready.push(std::cmp::Reverse((self.dag[s].position, s)));
                    }
                }
            }
        }
        let complete = out.len() == self.dag.node_count();
        (out, complete)
    }

    /// The nodes in index order, for walks where order does not matter.
    pub fn nodes_unordered(&self) -> impl Iterator<Item = &Node> + '_ {
        self.dag.node_weights().map(|s| &s.node)
    }

    /// Node ids in index order, for edits where order does not matter (an edit through
    /// [`Graph::node_mut`] makes the next ordered walk sort the graph again).
    pub fn node_ids_unordered(&self) -> Vec<NodeId> {
        self.dag.node_indices().collect()
    }

    /// Appends a node at the end of the graph.
    pub fn add_node(&mut self, node: Node) -> NodeId {
        let position = Position {
            anchor: self.next_anchor,
            seq: 0,
        };
        self.next_anchor += 1;
        self.insert(node, position)
    }

    /// Inserts a node that takes the place of `anchor` in the order (it runs where `anchor` ran,
    /// after any node inserted at the same place before it).
    pub fn insert_at(&mut self, anchor: NodeId, node: Node) -> NodeId {
        let position = Position {
            anchor: self.dag[anchor].position.anchor,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.insert(node, position)
    }

    fn insert(&mut self, node: Node, position: Position) -> NodeId {
        let id = self.dag.add_node(Slot {
            node,
            position,
            uses: BTreeSet::new(),
            defines: Vec::new(),
        });
        self.register(id);
        id
    }

    /// Removes a node and returns it. Its outputs become undefined until something else defines
    /// them.
    pub fn remove_node(&mut self, id: NodeId) -> Node {
        self.unregister(id);
        match self.dag.remove_node(id) {
            Some(slot) => slot.node,
            None => Node::default(),
        }
    }

    /// Replaces a node by a small subgraph placed where it was. The replacement must define the
    /// outputs of the node it replaces; their users are reconnected to it.
    pub fn replace_node(&mut self, id: NodeId, replacement: Vec<Node>) -> Vec<NodeId> {
        let anchor = self.dag[id].position.anchor;
        self.remove_node(id);
        replacement
            .into_iter()
            .map(|node| {
                let position = Position {
                    anchor,
                    seq: self.next_seq,
                };
                self.next_seq += 1;
                self.insert(node, position)
            })
            .collect()
    }

    /// The node that produces `value`, if a node of this graph does.
    pub fn producer(&self, value: &str) -> Option<NodeId> {
        self.producer.get(value).copied()
    }

    /// The nodes that read `value` (as an input or from inside a subgraph), in index order.
    pub fn users(&self, value: &str) -> Vec<NodeId> {
        self.users
            .get(value)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// True if `value` is read by a node or is a graph output.
    pub fn is_used(&self, value: &str) -> bool {
        self.users.get(value).is_some_and(|s| !s.is_empty())
            || self.outputs.iter().any(|o| o.name == value)
    }

    /// Makes every reader of `old` read `new` instead, including reads from subgraphs that see
    /// `old` from the outer scope, and graph outputs. Returns how many nodes changed.
    pub fn replace_uses(&mut self, old: &str, new: &str) -> usize {
        let users = self.users(old);
        for &id in &users {
            let mut node = self.node_mut(id);
            for input in node.inputs.iter_mut().filter(|i| *i == old) {
                *input = new.to_owned();
            }
            for g in node.subgraphs_mut() {
                g.rename_outer_reference(old, new);
            }
        }
        for output in self.outputs.iter_mut().filter(|o| o.name == old) {
            output.name = new.to_owned();
        }
        users.len()
    }

    /// Renames uses of an outer-scope value inside this graph and its subgraphs, unless this
    /// graph defines a value of the same name itself.
    fn rename_outer_reference(&mut self, old: &str, new: &str) {
        if self.defines_locally(old) {
            return;
        }
        for id in self.users(old) {
            let mut node = self.node_mut(id);
            for input in node.inputs.iter_mut().filter(|i| *i == old) {
                *input = new.to_owned();
            }
            for g in node.subgraphs_mut() {
                g.rename_outer_reference(old, new);
            }
        }
    }

    fn defines_locally(&self, name: &str) -> bool {
        self.producer.contains_key(name)
            || self.inputs.iter().any(|v| v.name == name)
            || self
                .initializers
                .iter()
                .any(|t| t.name.as_deref() == Some(name))
            || self.sparse_initializers.iter().any(|t| t.name == name)
    }

    /// Names this graph (with its subgraphs) reads but does not define: the outer-scope values it
    /// captures.
    pub fn outer_references(&self) -> BTreeSet<String> {
        self.users
            .iter()
            .filter(|(name, users)| !users.is_empty() && !self.defines_locally(name))
            .map(|(name, _)| name.clone())
            .chain(
                self.outputs
                    .iter()
                    .filter(|o| !self.defines_locally(&o.name))
                    .map(|o| o.name.clone()),
            )
            .collect()
    }

    /// Removes the given nodes if nothing uses their outputs, then any producer that becomes
    /// unused in turn. Only the seeds and their producers are considered, so nodes the model
    /// already had that are unused stay. Returns the number removed.
    pub fn remove_dead(&mut self, seeds: impl IntoIterator<Item = NodeId>) -> usize {
        self.remove_dead_nodes(seeds).len()
    }

    /// [`Graph::remove_dead`], returning the removed nodes (so their values' declarations can
    /// go too).
    pub fn remove_dead_nodes(&mut self, seeds: impl IntoIterator<Item = NodeId>) -> Vec<Node> {
        let mut work: Vec<NodeId> = seeds.into_iter().collect();
        let mut removed = Vec::new();
        while let Some(id) = work.pop() {
            let Some(node) = self.get(id) else { continue };
            let has_output = node.outputs.iter().any(|o| !o.is_empty());
            if !has_output || node.outputs.iter().any(|o| self.is_used(o)) {
                continue;
            }
            let preds: Vec<NodeId> = self.dag[id]
                .uses
                .iter()
                .filter_map(|name| self.producer.get(name).copied())
                .filter(|&p| p != id)
                .collect();
            removed.push(self.remove_node(id));
            work.extend(preds);
        }
        removed
    }

    /// The declaration of `name` among graph inputs, outputs and value_info, in that order.
    pub fn value_info(&self, name: &str) -> Option<&ValueInfo> {
        self.inputs
            .iter()
            .chain(&self.outputs)
            .chain(&self.value_info)
            .find(|v| v.name == name)
    }

    /// The initializer named `name`.
    pub fn initializer(&self, name: &str) -> Option<&StoredTensor> {
        self.initializers
            .iter()
            .find(|t| t.name.as_deref() == Some(name))
    }

    /// Every value and node name used in this graph and its subgraphs (for unique naming).
    pub fn collect_names<S: std::hash::BuildHasher>(&self, names: &mut HashSet<String, S>) {
        names.extend(self.inputs.iter().map(|v| v.name.clone()));
        names.extend(self.outputs.iter().map(|v| v.name.clone()));
        names.extend(self.value_info.iter().map(|v| v.name.clone()));
        names.extend(self.initializers.iter().filter_map(|t| t.name.clone()));
        names.extend(self.sparse_initializers.iter().map(|t| t.name.clone()));
        for (_, node) in self.nodes() {
            names.insert(node.name.clone());
            names.extend(node.inputs.iter().cloned());
            names.extend(node.outputs.iter().cloned());
            for g in node.subgraphs() {
                g.collect_names(names);
            }
        }
    }

    /// Checks the graph's invariants: no cycle, every input defined (by a node, a graph input or
    /// an initializer), each value defined once, graph outputs defined, and subgraphs valid in
    /// turn (reading the enclosing scopes' values as well as their own).
    ///
    /// # Example
    /// ```
    /// use multigather::ir::{Graph, Node};
    /// let mut g = Graph::new("g");
    /// g.add_node(Node::new("Relu", "r", ["x"], ["y"]));
    /// let err = g.validate().unwrap_err().to_string();
    /// assert_eq!(err, "graph 'g': node 'r' (Relu) reads 'x', which nothing defines");
    /// ```
    pub fn validate(&self) -> Result<()> {
        self.validate_in(&[])
    }

    /// [`Graph::validate`] for a graph nested in `outer`, the values defined before it in each
    /// enclosing scope, outermost first. The scopes are borrowed, not copied: a graph with many
    /// subgraphs is checked in time linear in its size.
    pub(crate) fn validate_in(&self, outer: &[&LocalNames]) -> Result<()> {
        let fail = |reason: String| {
            Err(Error::InvalidGraph {
                graph: self.name.clone(),
                reason,
            })
        };
        let (order, complete) = self.order();
        let complete = *complete;
        if !complete {
            let placed: HashSet<NodeId> = order.iter().copied().collect();
            let stuck = self
                .dag
                .node_indices()
                .filter(|id| !placed.contains(id))
                .map(|id| self.node(id))
                .min_by_key(|n| n.name.clone());
            let name = stuck.map(|n| n.name.clone()).unwrap_or_default();
            return fail(format!("node '{name}' is on a cycle"));
        }
        // Values defined in this graph so far; the enclosing scopes' are read through `outer`.
        let mut defined = LocalNames::default();
        let is_defined = |defined: &LocalNames, name: &str| {
            defined.contains(name) || outer.iter().any(|s| s.contains(name))
        };
        // An initializer may share its name with a graph input (it is the input's default), but
        // two inputs, or two initializers, of one name leave the value ambiguous.
        let mut inputs = LocalNames::default();
        for name in self.inputs.iter().map(|v| v.name.as_str()) {
            if !name.is_empty() && !inputs.insert(name) {
                return fail(format!("graph input '{name}' is defined twice"));
            }
        }
        let mut initializers = LocalNames::default();
        let stored = self
            .initializers
            .iter()
            .filter_map(|t| t.name.as_deref())
            .chain(self.sparse_initializers.iter().map(|t| t.name.as_str()));
        for name in stored {
            if !name.is_empty() && !initializers.insert(name) {
                return fail(format!("initializer '{name}' is defined twice"));
            }
        }
        defined.extend(inputs);
        defined.extend(initializers);
        for id in order {
            let node = self.node(*id);
            for input in node.inputs.iter().filter(|i| !i.is_empty()) {
                if node.outputs.contains(input) {
                    return fail(format!(
                        "node '{}' ({}) is on a cycle: it reads its own output '{input}'",
                        node.name,
                        node.qualified_op()
                    ));
                }
                if !is_defined(&defined, input) {
                    return fail(format!(
                        "node '{}' ({}) reads '{input}', which nothing defines",
                        node.name,
                        node.qualified_op()
                    ));
                }
            }
            if node.subgraphs().next().is_some() {
                let scopes: Vec<&LocalNames> = outer.iter().copied().chain([&defined]).collect();
                for g in node.subgraphs() {
                    g.validate_in(&scopes)?;
                }
            }
            for output in node.outputs.iter().filter(|o| !o.is_empty()) {
                if !defined.insert(output) {
                    return fail(format!(
                        "value '{output}' is defined twice (again by node '{}')",
                        node.name
                    ));
                }
            }
        }
        for output in &self.outputs {
            if !is_defined(&defined, &output.name) {
                return fail(format!(
                    "graph output '{}' is not defined by anything",
                    output.name
                ));
            }
        }
        Ok(())
    }

    fn register(&mut self, id: NodeId) {
        self.order.take();
        let uses = self.dag[id].node.uses();
        for name in &uses {
            self.users.entry(name.clone()).or_default().insert(id);
        }
        let outputs: Vec<String> = self.dag[id]
            .node
            .outputs
            .iter()
            .filter(|o| !o.is_empty())
            .cloned()
            .collect();
        let mut defines = Vec::with_capacity(outputs.len());
        for name in outputs {
            // A second producer of the same name is an invalid graph; the first one stays
            // registered and `validate` reports the duplicate.
            if self.producer.contains_key(&name) {
                continue;
            }
            self.producer.insert(name.clone(), id);
            defines.push(name);
        }
        self.dag[id].uses = uses;
        self.dag[id].defines = defines;
    }

    fn unregister(&mut self, id: NodeId) {
        self.order.take();
        let Some(slot) = self.dag.node_weight_mut(id) else {
            return;
        };
        let uses = std::mem::take(&mut slot.uses);
        let defines = std::mem::take(&mut slot.defines);
        for name in &uses {
            if let Some(set) = self.users.get_mut(name) {
                set.remove(&id);
                if set.is_empty() {
                    self.users.remove(name);
                }
            }
        }
        for name in defines {
            if self.producer.get(&name) == Some(&id) {
                self.producer.remove(&name);
            }
        }
    }

    /// Number of nodes per qualified op type, in this graph and its subgraphs.
    pub fn op_histogram(&self, counts: &mut BTreeMap<String, usize>) {
        for (_, node) in self.nodes() {
            *counts.entry(node.qualified_op()).or_default() += 1;
            for g in node.subgraphs() {
                g.op_histogram(counts);
            }
        }
    }
}

/// Mutable access to one node; re-indexes the node when dropped. See [`Graph::node_mut`].
pub struct NodeMut<'a> {
    graph: &'a mut Graph,
    id: NodeId,
}

impl std::ops::Deref for NodeMut<'_> {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.graph.dag[self.id].node
    }
}

impl std::ops::DerefMut for NodeMut<'_> {
    fn deref_mut(&mut self) -> &mut Node {
        &mut self.graph.dag[self.id].node
    }
}

impl Drop for NodeMut<'_> {
    fn drop(&mut self) {
        // Unregistering uses the names recorded at registration, so the edit is picked up whatever
        // it changed.
        self.graph.unregister(self.id);
        self.graph.register(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain() -> (Graph, Vec<NodeId>) {
        let mut g = Graph::new("g");
        g.inputs.push(ValueInfo::untyped("x"));
        g.outputs.push(ValueInfo::untyped("z"));
        let a = g.add_node(Node::new("Relu", "a", ["x"], ["y"]));
        let b = g.add_node(Node::new("Neg", "b", ["y"], ["z"]));
        (g, vec![a, b])
    }

    fn op_order(g: &Graph) -> Vec<String> {
        g.nodes().map(|(_, n)| n.name.clone()).collect()
    }

    #[test]
    fn order_follows_dependencies_not_insertion() {
        let mut g = Graph::new("g");
        g.inputs.push(ValueInfo::untyped("x"));
        g.add_node(Node::new("Neg", "second", ["y"], ["z"]));
        g.add_node(Node::new("Relu", "first", ["x"], ["y"]));
        assert_eq!(op_order(&g), ["first", "second"]);
    }

    #[test]
    fn replacement_takes_the_place_of_the_node() {
        let (mut g, ids) = chain();
        g.replace_node(
            ids[0],
            vec![
                Node::new("Abs", "a1", ["x"], ["t"]),
                Node::new("Relu", "a2", ["t"], ["y"]),
            ],
        );
        assert_eq!(op_order(&g), ["a1", "a2", "b"]);
        let b = g.producer("z").unwrap();
        assert_eq!(g.users("y"), vec![b]);
        g.validate().unwrap();
    }

    #[test]
    fn node_mut_reindexes_edits() {
        let (mut g, ids) = chain();
        g.node_mut(ids[1]).inputs[0] = "x".into();
        assert!(g.users("y").is_empty());
        assert_eq!(g.users("x").len(), 2);
        assert_eq!(g.remove_dead([ids[0]]), 1);
        assert_eq!(op_order(&g), ["b"]);
    }

    #[test]
    fn validate_names_the_problem() {
        let (mut g, _) = chain();
        g.add_node(Node::new("Relu", "bad", ["nope"], ["w"]));
        let err = g.validate().unwrap_err().to_string();
        assert_eq!(
            err,
            "graph 'g': node 'bad' (Relu) reads 'nope', which nothing defines"
        );

        let (mut g, _) = chain();
        g.add_node(Node::new("Relu", "dup", ["x"], ["y"]));
        let err = g.validate().unwrap_err().to_string();
        assert!(err.contains("value 'y' is defined twice"), "{err}");

        let mut g = Graph::new("g");
        g.add_node(Node::new("Relu", "p", ["q_out"], ["p_out"]));
        g.add_node(Node::new("Relu", "q", ["p_out"], ["q_out"]));
        let err = g.validate().unwrap_err().to_string();
        assert_eq!(err, "graph 'g': node 'p' is on a cycle");
    }

    #[test]
    fn replace_uses_reaches_into_subgraphs() {
        let (mut g, _) = chain();
        let mut body = Graph::new("body");
        body.outputs.push(ValueInfo::untyped("w"));
        body.add_node(Node::new("Neg", "inner", ["y"], ["w"]));
        let user = g.add_node(
            Node::new("If", "if", ["x"], ["o"])
                .with_attr("then_branch", AttrValue::Graph(Box::new(body))),
        );
        assert!(g.users("y").contains(&user));
        g.add_node(Node::new("Abs", "alt", ["x"], ["y2"]));
        g.replace_uses("y", "y2");
        let inner = g.node(user).attr_graph("then_branch").unwrap();
        assert!(inner.outer_references().contains("y2"));
        assert!(!g.users("y2").is_empty());
        assert!(g.users("y").is_empty());
    }
}
