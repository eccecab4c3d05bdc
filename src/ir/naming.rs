//! How other parts name a node or a function: the labels of reports and messages, and the key by
//! which a call resolves a model-local function.

use super::{Function, Node};

/// How a call names a model-local function, and how the function is named: domain, name (the
/// calling node's op type) and overload. The loader, the passes, `verify` and the interpreter
/// resolve calls by it ([`Node::call_key`], [`Function::key`]).
pub type FunctionKey<'a> = (&'a str, &'a str, Option<&'a str>);

impl Function {
    /// The key calls name this function by.
    ///
    /// # Example
    /// ```
    /// use multigather::ir::{Function, Graph, Node};
    /// let f = Function {
    ///     name: "Twice".into(),
    ///     domain: "local".into(),
    ///     overload: None,
    ///     attributes: Vec::new(),
    ///     attribute_defaults: Vec::new(),
    ///     opset_imports: Vec::new(),
    ///     body: Graph::new("body"),
    ///     doc_string: None,
    ///     metadata_props: Vec::new(),
    /// };
    /// let call = Node::new("Twice", "t", ["x"], ["y"]).with_domain("local");
    /// assert_eq!(f.key(), call.call_key());
    /// ```
    pub fn key(&self) -> FunctionKey<'_> {
        (&self.domain, &self.name, self.overload.as_deref())
    }
}

impl Node {
    /// The key of the function this node calls, if the model defines one of that key.
    pub fn call_key(&self) -> FunctionKey<'_> {
        (&self.domain, &self.op_type, self.overload.as_deref())
    }

    /// How reports name a node: its name, or its first output's when it has none.
    ///
    /// # Example
    /// ```
    /// use multigather::ir::Node;
    /// assert_eq!(Node::new("Relu", "", ["x"], ["y"]).label(), "y");
    /// assert_eq!(Node::new("Relu", "act", ["x"], ["y"]).label(), "act");
    /// ```
    pub fn label(&self) -> String {
        if self.name.is_empty() {
            self.outputs.first().cloned().unwrap_or_default()
        } else {
            self.name.clone()
        }
    }

    /// How messages name a node: `'name'`, or `producing 'y'` when it has no name
    /// ([`crate::gather::node_label`], which the onnxruntime library shares).
    ///
    /// # Example
    /// ```
    /// use multigather::ir::Node;
    /// assert_eq!(Node::new("Relu", "", ["x"], ["y"]).quoted_label(), "producing 'y'");
    /// assert_eq!(Node::new("Relu", "act", ["x"], ["y"]).quoted_label(), "'act'");
    /// ```
    pub fn quoted_label(&self) -> String {
        crate::gather::node_label(&self.name, self.outputs.first().map(String::as_str))
    }
}
