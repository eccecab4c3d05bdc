//! The public rule API: a [`Rule`] decides node by node, from a [`Site`] (the node, its graph,
//! the types known there, where it is), what [`Change`] replaces the node. The walk of
//! `walk.rs` applies it to every graph of a model, for [`super::RulePass`] and for this crate's
//! passes.

use std::cell::RefCell;
use std::collections::HashSet;

use super::emit::{Constants, Emitter, Replacement};
use crate::error::Result;
use crate::infer::TypeEnv;
use crate::ir::{Graph, Node, StoredTensor, TensorType, UniqueNames, ValueInfo};

/// A model-local function's [`crate::ir::FunctionKey`], owned: the walk keeps the keys while it
/// edits the model's graphs.
pub(crate) type FunctionKey = (String, String, Option<String>);

/// The owned form of a key.
pub(crate) fn owned((domain, name, overload): crate::ir::FunctionKey<'_>) -> FunctionKey {
    (
        domain.to_owned(),
        name.to_owned(),
        overload.map(str::to_owned),
    )
}

/// The function a node calls, if it names one of `functions`.
pub(crate) fn called_function(
    node: &Node,
    functions: &HashSet<FunctionKey>,
) -> Option<FunctionKey> {
    let key = owned(node.call_key());
    functions.contains(&key).then_some(key)
}

/// A node the walk visits, where it lives and what is known there: what a [`Rule`] decides
/// from.
///
/// # Example
/// A rule that only looks, counting the `Relu` nodes of function bodies:
/// ```
/// use multigather::pass::{Change, Rule, Site};
///
/// struct ReluInFunctions(usize);
/// impl Rule for ReluInFunctions {
///     fn visit(&mut self, site: &Site<'_>) -> multigather::Result<Option<Change>> {
///         if site.node().op_type == "Relu" && site.in_function() {
///             self.0 += 1;
///         }
///         Ok(None)
///     }
/// }
/// ```
pub struct Site<'a> {
    /// The visited node.
    pub(crate) node: &'a Node,
    /// The graph holding the node, as it is before the node is replaced.
    pub(crate) graph: &'a Graph,
    /// The types known at the node.
    pub(crate) env: &'a TypeEnv<'a>,
    /// The graph's name for reports: the main graph's name, `graph/node.attribute` for
    /// subgraphs, `function domain.name` for function bodies.
    pub(crate) scope: &'a str,
    /// The default-domain opset of the graph.
    pub(crate) opset: i64,
    /// The model's default-domain opset (the graph's own may differ in a function body).
    pub(crate) model_opset: i64,
    /// Whether the graph is a function body or one of its subgraphs.
    pub(crate) in_function: bool,
    /// Whether the graph is the body of a node (`If`, `Loop`, `Scan`, ...) at any depth.
    pub(crate) in_subgraph: bool,
    /// How constants can be added to the graph.
    pub(crate) constants: Constants,
    /// The model-local functions: a node naming one calls it, whatever its op type says, and a
    /// replacement must not name one by accident.
    pub(crate) functions: &'a HashSet<FunctionKey>,
    /// The names taken in the model, for the values and nodes a replacement introduces.
    pub(crate) names: &'a RefCell<UniqueNames>,
}

impl<'a> Site<'a> {
    /// The visited node.
    pub fn node(&self) -> &'a Node {
        self.node
    }

    /// The graph holding the node, as it is before the node is replaced: its inputs, outputs,
    /// initializers and the other nodes.
    pub fn graph(&self) -> &'a Graph {
        self.graph
    }

    /// The static types known at the node: declarations and what inference proves, with the
    /// enclosing scopes' values visible in a subgraph and the call sites' agreement in a
    /// function body. The walk types each graph once; types a [`Change`] establishes
    /// ([`Change::with_output_type`]) are known to the nodes after it.
    pub fn types(&self) -> &'a TypeEnv<'a> {
        self.env
    }

    /// The type of `value` here, if known.
    pub fn type_of(&self, value: &str) -> Option<&'a TensorType> {
        self.env.get(value)
    }

    /// The graph's name for reports: the main graph's name, `graph/node.attribute` for a
    /// subgraph (`[i]` appended for one of a list), `function domain.name` for a function body
    /// and its subgraphs.
    pub fn scope(&self) -> &'a str {
        self.scope
    }

    /// The default-domain opset of the graph (a function body's may differ from the model's).
    pub fn opset(&self) -> i64 {
        self.opset
    }

    /// Whether the graph is a model-local function's body or one of its subgraphs.
    pub fn in_function(&self) -> bool {
        self.in_function
    }

    /// Whether the graph is a subgraph (the body or branch of an `If`, `Loop` or `Scan` node,
    /// at any depth) rather than the main graph or a function body itself.
    pub fn in_subgraph(&self) -> bool {
        self.in_subgraph
    }

    /// Whether `node` calls a model-local function rather than an operator: a replacement's
    /// nodes should not, by accident.
    pub fn calls_function(&self, node: &Node) -> bool {
        called_function(node, self.functions).is_some()
    }

    /// A name no value or node of the model has yet, made from `base`, for what a replacement
    /// introduces.
    pub fn fresh_name(&self, base: &str) -> String {
        self.names.borrow_mut().fresh(base)
    }

    /// An emitter for the replacement of the node labelled `base` here: at the graph's opset,
    /// and valid at the model's too where a function body imports another one.
    pub(crate) fn emitter<'n>(&self, base: &str, names: &'n mut UniqueNames) -> Emitter<'n> {
        let mut e = Emitter::new(base, names, self.opset, self.constants);
        e.also_at = (self.model_opset != self.opset).then_some(self.model_opset);
        e
    }
}

/// What replaces a visited node: new nodes in its place (none to remove it), the declarations
/// and initializers they need, renamed uses of values, and the types the replacement
/// establishes.
///
/// The walk applies a change in this order: the node is replaced by its [`Change::nodes`] (placed where
/// it was), declarations and initializers join the graph, every reader of a
/// renamed value (including reads from subgraphs and the graph's outputs) reads its new name,
/// and, when asked, producers nothing reads any more are removed.
///
/// # Example
/// Replacing a `Neg` by a `Sub` from zero, and removing a node whose readers take its input:
/// ```
/// use multigather::ir::{Node, StoredTensor};
/// use multigather::pass::Change;
///
/// let sub = Node::new("Sub", "neg_as_sub", ["zero", "x"], ["y"]);
/// let change = Change::replace_with(vec![sub])
///     .with_initializer(StoredTensor::from_i64s(Some("zero"), &[], &[0]));
/// assert_eq!(change.nodes().len(), 1);
///
/// let fold = Change::remove().with_rename("identity_out", "x");
/// assert!(fold.nodes().is_empty());
/// ```
#[derive(Debug, Default)]
pub struct Change {
    pub(crate) replacement: Replacement,
    /// Types of the replaced node's outputs, made known to the nodes after it.
    pub(crate) output_types: Vec<(String, TensorType)>,
    /// Remove the producers of the replaced node's inputs (and theirs, in turn) once nothing
    /// reads them.
    pub(crate) prune_inputs: bool,
    /// Values whose readers read another value instead: `(old, new)`.
    pub(crate) renames: Vec<(String, String)>,
}

impl Change {
    /// The node is replaced by `nodes`, which must define the node's outputs (or those outputs
    /// must be renamed away, [`Change::with_rename`]).
    pub fn replace_with(nodes: Vec<Node>) -> Change {
        Change {
            replacement: Replacement {
                nodes,
                ..Replacement::default()
            },
            ..Change::default()
        }
    }

    /// The node is removed; its outputs' readers must be given other values
    /// ([`Change::with_rename`]).
    pub fn remove() -> Change {
        Change::default()
    }

    /// Every reader of `old` reads `new` instead, in this graph and its subgraphs; a graph
    /// output named `old` is renamed `new`. `old`'s declaration in the graph goes.
    pub fn with_rename(mut self, old: impl Into<String>, new: impl Into<String>) -> Change {
        self.renames.push((old.into(), new.into()));
        self
    }

    /// Declares a value the replacement introduces (its type and shape, for readers of the
    /// model and for inference).
    pub fn with_declaration(mut self, value: ValueInfo) -> Change {
        self.replacement.value_info.push(value);
        self
    }

    /// Adds an initializer the replacement reads.
    pub fn with_initializer(mut self, tensor: StoredTensor) -> Change {
        self.replacement.initializers.push(tensor);
        self
    }

    /// Makes `value`'s type known to the nodes after this one.
    pub fn with_output_type(mut self, value: impl Into<String>, ty: TensorType) -> Change {
        self.output_types.push((value.into(), ty));
        self
    }

    /// Once the node is replaced, removes the producers of its inputs (and theirs, in turn)
    /// that nothing reads any more, with their declarations and the initializers only they
    /// read.
    pub fn pruning_inputs(mut self) -> Change {
        self.prune_inputs = true;
        self
    }

    /// The nodes that take the visited node's place.
    pub fn nodes(&self) -> &[Node] {
        &self.replacement.nodes
    }

    /// A change made of an emitted replacement.
    pub(crate) fn from_replacement(replacement: Replacement) -> Change {
        Change {
            replacement,
            ..Change::default()
        }
    }
}

/// A per-node decision, which [`super::RulePass`] (or a pass of this crate) applies to every graph of
/// a model.
///
/// # Example
/// Folding `Identity` nodes, `Identity(x) -> y ==> (readers of y read x)`, unless `y` is an
/// output of its graph (whose name is the graph's interface):
/// ```
/// use multigather::ir::{is_onnx_domain, Dim, Graph, Model, Node, Type, ValueInfo};
/// use multigather::pass::{Change, PassManager, Rule, RulePass, Site};
/// use multigather::DataType;
///
/// struct FoldIdentity;
/// impl Rule for FoldIdentity {
///     fn visit(&mut self, site: &Site<'_>) -> multigather::Result<Option<Change>> {
///         let node = site.node();
///         let ([input], [output]) = (node.inputs.as_slice(), node.outputs.as_slice()) else {
///             return Ok(None);
///         };
///         let is_output = site.graph().outputs.iter().any(|o| &o.name == output);
///         if node.op_type != "Identity" || !is_onnx_domain(&node.domain) || is_output {
///             return Ok(None);
///         }
///         Ok(Some(Change::remove().with_rename(output, input)))
///     }
/// }
///
/// // x -> Identity -> a -> Relu -> b -> Identity -> y (a graph output)
/// let mut g = Graph::new("main");
/// g.inputs.push(ValueInfo::new("x", Type::tensor(DataType::Float, vec![Dim::Known(3)])));
/// g.outputs.push(ValueInfo::untyped("y"));
/// g.add_node(Node::new("Identity", "id_a", ["x"], ["a"]));
/// g.add_node(Node::new("Relu", "relu", ["a"], ["b"]));
/// g.add_node(Node::new("Identity", "id_y", ["b"], ["y"]));
/// let mut model = Model::new(g, 13);
///
/// let mut pass = RulePass::new("FoldIdentity", FoldIdentity);
/// PassManager::new().run(&mut model, &mut [&mut pass])?;
/// assert_eq!(pass.replaced(), 1);
/// let ops: Vec<String> = model.graph.nodes().map(|(_, n)| format!("{}({})", n.op_type, n.inputs[0])).collect();
/// assert_eq!(ops, ["Relu(x)", "Identity(b)"]);
/// # Ok::<(), multigather::Error>(())
/// ```
pub trait Rule {
    /// Called for every node in execution order, with inner graphs visited before the node
    /// that holds them; `Ok(None)` leaves the node as it is, an error stops the walk (the
    /// model is then half-changed: run the rule on a copy, or through a [`super::PassManager`]
    /// whose caller drops the model on error). Nodes that call a model-local function are not
    /// operators and are not visited (except calls of `multigather.GatherMultiaxis`, whose local
    /// definitions are its lowering).
    fn visit(&mut self, site: &Site<'_>) -> Result<Option<Change>>;

    /// Called for every node of a function body the walk leaves alone (its call sites
    /// disagree on the ranks of its inputs, or it is called from a cycle of calls), and why.
    fn skip(&mut self, _node: &Node, _scope: &str, _reason: &str) {}

    /// Called with each declaration of a graph that contradicts the inferred types.
    fn contradiction(&mut self, _scope: &str, _text: &str) {}
}
