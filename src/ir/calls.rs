//! The call graph of a model's local functions: which function calls which, the order that puts
//! callers before callees, and the call cycles (which the loader refuses).

use std::collections::HashMap;

use super::{Function, FunctionKey, Graph};

/// For each model-local function (by its index in the model's list), the functions its body and
/// the body's subgraphs call, in the order the calls are met (a function called twice is listed
/// twice).
///
/// # Example
/// ```
/// use multigather::ir::{CallGraph, Function, Graph, Node};
/// let function = |name: &str, callee: &str| {
///     let mut body = Graph::new(name);
///     body.add_node(Node::new(callee, "call", ["x"], ["y"]).with_domain("local"));
///     Function {
///         name: name.into(),
///         domain: "local".into(),
///         overload: None,
///         attributes: Vec::new(),
///         attribute_defaults: Vec::new(),
///         opset_imports: Vec::new(),
///         body,
///         doc_string: None,
///         metadata_props: Vec::new(),
///     }
/// };
/// let functions = [function("f", "g"), function("g", "Relu")];
/// let calls = CallGraph::new(&functions);
/// assert_eq!(calls.callers_first(), (vec![0, 1], vec![]));
/// assert_eq!(calls.cycle(), None);
/// let cyclic = CallGraph::new(&[function("f", "g"), function("g", "f")]);
/// assert_eq!(cyclic.cycle(), Some(vec![0, 1, 0]));
/// assert_eq!(cyclic.callers_first(), (vec![], vec![0, 1]));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallGraph {
    /// The callees of each function.
    pub callees: Vec<Vec<usize>>,
}

impl CallGraph {
    /// The call graph of `functions`, a model's local functions.
    pub fn new(functions: &[Function]) -> CallGraph {
        let index: HashMap<FunctionKey, usize> = functions
            .iter()
            .enumerate()
            .map(|(i, f)| (f.key(), i))
            .collect();
        let callees = functions
            .iter()
            .map(|f| {
                let mut out = Vec::new();
                calls(&f.body, &index, &mut out);
                out
            })
            .collect();
        CallGraph { callees }
    }

    /// The functions in an order that puts every caller before its callees, and the ones left
    /// out: those on a call cycle and those only such functions call.
    pub fn callers_first(&self) -> (Vec<usize>, Vec<usize>) {
        let n = self.callees.len();
        let mut callers = vec![0usize; n];
        for c in &self.callees {
            for &j in c {
                callers[j] += 1;
            }
        }
        let mut ready: Vec<usize> = (0..n).filter(|&i| callers[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(i) = ready.pop() {
            order.push(i);
            for &j in &self.callees[i] {
                callers[j] -= 1;
                if callers[j] == 0 {
                    ready.push(j);
                }
            }
        }
        let mut done = vec![false; n];
        for &i in &order {
            done[i] = true;
        }
        let left = (0..n).filter(|&i| !done[i]).collect();
        (order, left)
    }

    /// A call cycle, as the path of functions from one back to itself (`f`, ..., `f`), or `None`
    /// when no function calls itself, directly or through others. The search is depth-first
    /// from each function in order, with an explicit stack (a hostile model may chain many
    /// functions).
    pub fn cycle(&self) -> Option<Vec<usize>> {
        #[derive(Clone, Copy, PartialEq)]
        enum State {
            New,
            OnStack,
            Done,
        }
        let mut state = vec![State::New; self.callees.len()];
        for start in 0..self.callees.len() {
            if state[start] != State::New {
                continue;
            }
            state[start] = State::OnStack;
            let mut stack = vec![(start, 0usize)];
            while let Some(top) = stack.last_mut() {
                let (f, next) = *top;
                let Some(&callee) = self.callees[f].get(next) else {
                    state[f] = State::Done;
                    stack.pop();
                    continue;
                };
                top.1 += 1;
                match state[callee] {
                    State::New => {
                        state[callee] = State::OnStack;
                        stack.push((callee, 0));
                    }
                    // A callee still on the stack closes a cycle.
                    State::OnStack => {
                        let from = stack.iter().position(|&(g, _)| g == callee).unwrap_or(0);
                        let path = stack[from..]
                            .iter()
                            .map(|&(g, _)| g)
                            .chain(std::iter::once(callee))
                            .collect();
                        return Some(path);
                    }
                    State::Done => {}
                }
            }
        }
        None
    }
}

/// The functions (by index) that nodes of `graph` and its subgraphs call.
fn calls(graph: &Graph, index: &HashMap<FunctionKey, usize>, out: &mut Vec<usize>) {
    for node in graph.nodes_unordered() {
        if let Some(&i) = index.get(&node.call_key()) {
            out.push(i);
        }
        for g in node.subgraphs() {
            calls(g, index, out);
        }
    }
}
