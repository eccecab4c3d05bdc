//! The text form: a stable, readable rendering of a model in ONNX's textual syntax.
//!
//! It follows onnx `docs/Syntax.md` and the layout of `onnx.printer`, so small models parse back
//! with `onnx.parser`: a header of model fields, the main graph with its inputs, outputs,
//! initializers and value infos, its nodes one per line with subgraphs indented in place, then the
//! model-local functions. Tensors of more than [`TextOptions::max_elements`] elements are elided to
//! their type and shape (`{...}`), external ones show their location. Output is deterministic:
//! nodes in execution order, everything else in file order.
//!
//! Snapshots, `multigather inspect` and error messages all use this form.

use std::fmt::Write;

use crate::ir::{
    AttrValue, Dim, Function, Graph, Model, Node, OpsetImport, Payload, StoredTensor, Type,
    TypeKind, ValueInfo,
};
use crate::DataType;

/// Rendering options.
#[derive(Clone, Copy, Debug)]
pub struct TextOptions {
    /// Tensors with more elements than this are elided to `{...}`.
    pub max_elements: usize,
    /// Print `value_info` declarations after the initializers.
    pub value_info: bool,
}

impl Default for TextOptions {
    fn default() -> TextOptions {
        TextOptions {
            max_elements: 16,
            value_info: true,
        }
    }
}

/// Renders a whole model.
///
/// # Example
/// ```
/// use multigather::ir::{Dim, Graph, Model, Node, Type, ValueInfo};
/// use multigather::DataType;
/// let mut g = Graph::new("main");
/// g.inputs.push(ValueInfo::new("X", Type::tensor(DataType::Float, vec![Dim::Symbolic("N".into())])));
/// g.outputs.push(ValueInfo::new("Y", Type::tensor(DataType::Float, vec![Dim::Symbolic("N".into())])));
/// g.add_node(Node::new("Relu", "", ["X"], ["Y"]));
/// let text = multigather::text::model_to_text(&Model::new(g, 13));
/// assert!(text.contains("main (float[N] X) => (float[N] Y)"));
/// assert!(text.contains("   Y = Relu (X)"));
/// ```
pub fn model_to_text(model: &Model) -> String {
    model_to_text_with(model, &TextOptions::default())
}

/// Renders a whole model with the given options.
pub fn model_to_text_with(model: &Model, options: &TextOptions) -> String {
    let mut p = Printer {
        out: String::new(),
        options: *options,
    };
    p.model(model);
    p.out
}

/// A unified diff (three lines of context) of two models' text forms, headed `--- original` /
/// `+++ rewritten`; empty when both print the same.
///
/// It is as stable as the text form: nodes in execution order, everything else in file order,
/// floats in their shortest round-trip form, tensors of more than 16 elements elided, and no
/// path, time or platform in it, so a snapshot of it holds across runs and machines. `multigather
/// rewrite --diff` prints this text; [`crate::pass::rewrite_diff`] rewrites and diffs in one call.
///
/// # Example
/// ```
/// use multigather::ir::{Graph, Model, Node};
/// let mut g = Graph::new("main");
/// g.add_node(Node::new("Relu", "", ["X"], ["Y"]));
/// let before = Model::new(g.clone(), 13);
/// g.add_node(Node::new("Neg", "", ["Y"], ["Z"]));
/// let after = Model::new(g, 13);
/// let diff = multigather::text::model_diff(&before, &after);
/// assert!(diff.starts_with("--- original\n+++ rewritten\n@@"));
/// assert!(diff.contains("\n+   Z = Neg (Y)\n"));
/// assert_eq!(multigather::text::model_diff(&before, &before), "");
/// ```
pub fn model_diff(before: &Model, after: &Model) -> String {
    let (a, b) = (model_to_text(before), model_to_text(after));
    if a == b {
        return String::new();
    }
    similar::TextDiff::from_lines(&a, &b)
        .unified_diff()
        .context_radius(3)
        .header("original", "rewritten")
        .to_string()
}

/// Renders one graph (no model header), e.g. a subgraph in an error message.
pub fn graph_to_text(graph: &Graph) -> String {
    let mut p = Printer {
        out: String::new(),
        options: TextOptions::default(),
    };
    p.graph(graph, 0);
    p.out
}

/// Renders one node on one line (subgraphs included, indented).
pub fn node_to_text(node: &Node) -> String {
    let mut p = Printer {
        out: String::new(),
        options: TextOptions::default(),
    };
    p.node(node, 0);
    p.out.trim_end().to_owned()
}

/// Renders a type as in the text syntax: `float[N,128]`, `int64` (a scalar), `float[]` (unknown
/// rank), `seq(float[])`.
pub fn type_to_text(ty: &Type) -> String {
    let mut s = String::new();
    write_type(&mut s, ty);
    s
}

struct Printer {
    out: String,
    options: TextOptions,
}

const INDENT: &str = "   ";

impl Printer {
    fn indent(&mut self, depth: usize) {
        for _ in 0..depth {
            self.out.push_str(INDENT);
        }
    }

    fn model(&mut self, m: &Model) {
        let mut fields = Vec::new();
        if let Some(v) = m.ir_version {
            fields.push(format!("ir_version: {v}"));
        }
        fields.push(format!("opset_import: {}", opsets(&m.opset_imports)));
        for (key, value) in [
            ("producer_name", &m.producer_name),
            ("producer_version", &m.producer_version),
            ("domain", &m.domain),
            ("doc_string", &m.doc_string),
        ] {
            if let Some(v) = value {
                fields.push(format!("{key}: {}", quote(v)));
            }
        }
        if let Some(v) = m.model_version {
            fields.push(format!("model_version: {v}"));
        }
        if !m.metadata_props.is_empty() {
            fields.push(format!("metadata_props: {}", str_map(&m.metadata_props)));
        }
        self.out.push_str("<\n");
        self.out.push_str(
            &fields
                .iter()
                .map(|f| format!("{INDENT}{f}"))
                .collect::<Vec<_>>()
                .join(",\n"),
        );
        self.out.push_str("\n>\n");
        self.graph(&m.graph, 0);
        for f in &m.functions {
            self.function(f);
        }
        if !m.training_info.is_empty() {
            let _ = writeln!(
                self.out,
                "# training_info: {} entries (not shown)",
                m.training_info.len()
            );
        }
    }

    fn function(&mut self, f: &Function) {
        let mut fields = vec![format!("domain: {}", quote(&f.domain))];
        if let Some(o) = &f.overload {
            fields.push(format!("overload: {}", quote(o)));
        }
        fields.push(format!("opset_import: {}", opsets(&f.opset_imports)));
        if let Some(d) = &f.doc_string {
            fields.push(format!("doc_string: {}", quote(d)));
        }
        self.out.push_str("<\n");
        self.out.push_str(
            &fields
                .iter()
                .map(|f| format!("  {f}"))
                .collect::<Vec<_>>()
                .join(",\n"),
        );
        self.out.push_str("\n>\n");
        self.out.push_str(&id(&f.name));
        let mut attrs: Vec<String> = f.attributes.iter().map(|a| id(a)).collect();
        for a in &f.attribute_defaults {
            let mut s = String::new();
            self.attr_into(&mut s, &a.name, &a.value, 0);
            attrs.push(s);
        }
        if !attrs.is_empty() {
            let _ = write!(self.out, " <{}>", attrs.join(", "));
        }
        let names = |vs: &[ValueInfo]| {
            vs.iter()
                .map(|v| id(&v.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = write!(
            self.out,
            "({}) => ({})",
            names(&f.body.inputs),
            names(&f.body.outputs)
        );
        if self.options.value_info && !f.body.value_info.is_empty() {
            let infos: Vec<String> = f.body.value_info.iter().map(value_info).collect();
            let _ = write!(self.out, "\n<{}>", infos.join(", "));
        }
        self.out.push('\n');
        self.body(&f.body, 0);
        self.out.push('\n');
    }

    fn graph(&mut self, g: &Graph, depth: usize) {
        let inputs: Vec<String> = g.inputs.iter().map(value_info).collect();
        let outputs: Vec<String> = g.outputs.iter().map(value_info).collect();
        let _ = write!(
            self.out,
            "{} ({}) => ({})",
            id(&g.name),
            inputs.join(", "),
            outputs.join(", ")
        );
        let mut decls: Vec<String> = g.initializers.iter().map(|t| self.initializer(t)).collect();
        decls.extend(
            g.sparse_initializers
                .iter()
                .map(|s| format!("sparse_tensor {} = {{...}}", id(&s.name))),
        );
        if self.options.value_info {
            decls.extend(g.value_info.iter().map(value_info));
        }
        if !decls.is_empty() {
            let sep = format!(",\n{}", INDENT.repeat(depth + 2));
            let _ = write!(
                self.out,
                "\n{}<\n{}{}\n{}>",
                INDENT.repeat(depth + 1),
                INDENT.repeat(depth + 2),
                decls.join(&sep),
                INDENT.repeat(depth + 1)
            );
        }
        if depth == 0 {
            self.out.push('\n');
        } else {
            self.out.push(' ');
        }
        self.body(g, depth);
    }

    /// The node list. At depth 0 the caller has put the brace on a line of its own; in subgraphs
    /// it ends the header line.
    fn body(&mut self, g: &Graph, depth: usize) {
        self.out.push_str("{\n");
        for (_, node) in g.nodes() {
            self.node(node, depth + 1);
        }
        self.indent(depth);
        self.out.push('}');
        if depth == 0 {
            self.out.push('\n');
        }
    }

    fn node(&mut self, n: &Node, depth: usize) {
        self.indent(depth);
        if !n.name.is_empty() {
            let _ = write!(self.out, "[{}] ", id(&n.name));
        }
        let outputs: Vec<String> = n.outputs.iter().map(|o| id(o)).collect();
        let inputs: Vec<String> = n.inputs.iter().map(|i| id(i)).collect();
        let mut op = if n.domain.is_empty() {
            id(&n.op_type)
        } else {
            format!("{}.{}", n.domain, id(&n.op_type))
        };
        if let Some(overload) = &n.overload {
            op = format!("{op}:{}", id(overload));
        }
        let _ = write!(self.out, "{} = {op}", outputs.join(", "));
        let has_graph = n.subgraphs().next().is_some();
        let mut attrs = String::new();
        if !n.attributes.is_empty() {
            attrs.push_str(" <");
            for (i, a) in n.attributes.iter().enumerate() {
                if i > 0 {
                    attrs.push_str(", ");
                }
                self.attr_into(&mut attrs, &a.name, &a.value, depth);
            }
            attrs.push('>');
        }
        if has_graph {
            let _ = write!(self.out, " ({}){attrs}", inputs.join(", "));
        } else {
            let _ = write!(self.out, "{attrs} ({})", inputs.join(", "));
        }
        self.out.push('\n');
    }

    fn attr_into(&mut self, s: &mut String, name: &str, value: &AttrValue, depth: usize) {
        if let AttrValue::Ref { name: r, .. } = value {
            let _ = write!(s, "{}: {} = @{}", id(name), ref_type_name(value), id(r));
            return;
        }
        let _ = write!(s, "{}: {} = ", id(name), value.type_name());
        match value {
            AttrValue::Float(v) => s.push_str(&float32(*v)),
            AttrValue::Int(v) => {
                let _ = write!(s, "{v}");
            }
            AttrValue::String(v) => s.push_str(&quote(&String::from_utf8_lossy(v))),
            AttrValue::Tensor(t) => s.push_str(&self.tensor_constant(t)),
            AttrValue::Graph(g) => s.push_str(&self.subgraph(g, depth)),
            AttrValue::SparseTensor(_) => s.push_str("{...}"),
            AttrValue::Type(t) => s.push_str(&type_to_text(t)),
            AttrValue::Floats(v) => list(s, v.iter().map(|x| float32(*x))),
            AttrValue::Ints(v) => list(s, v.iter().map(|x| x.to_string())),
            AttrValue::Strings(v) => list(s, v.iter().map(|x| quote(&String::from_utf8_lossy(x)))),
            AttrValue::Tensors(v) => {
                let items: Vec<String> = v.iter().map(|t| self.tensor_constant(t)).collect();
                list(s, items.into_iter())
            }
            AttrValue::Graphs(v) => {
                let items: Vec<String> = v.iter().map(|g| self.subgraph(g, depth)).collect();
                list(s, items.into_iter())
            }
            AttrValue::SparseTensors(v) => list(s, v.iter().map(|_| "{...}".to_string())),
            AttrValue::Types(v) => list(s, v.iter().map(type_to_text)),
            AttrValue::Ref { .. } => {}
        }
    }

    fn subgraph(&mut self, g: &Graph, depth: usize) -> String {
        let mut p = Printer {
            out: String::new(),
            options: self.options,
        };
        p.graph(g, depth + 1);
        // The graph printer indents its body at `depth + 1`; its first line follows the `=`.
        p.out.trim_start().to_owned()
    }

    fn initializer(&self, t: &StoredTensor) -> String {
        format!(
            "{} {} = {}",
            tensor_type(t.elem, &t.dims),
            id(t.display_name()),
            self.tensor_data(t)
        )
    }

    /// A tensor attribute value. Its name is shown only when it is a plain identifier: the onnx
    /// parser does not accept a quoted name in this position.
    fn tensor_constant(&self, t: &StoredTensor) -> String {
        match &t.name {
            Some(name) if !name.is_empty() && id(name) == *name => format!(
                "{} {} {}",
                tensor_type(t.elem, &t.dims),
                id(name),
                self.tensor_data(t)
            ),
            _ => format!("{} {}", tensor_type(t.elem, &t.dims), self.tensor_data(t)),
        }
    }

    fn tensor_data(&self, t: &StoredTensor) -> String {
        if let Payload::External(e) = &t.payload {
            return str_map(&e.entries);
        }
        let count = t.element_count().unwrap_or(usize::MAX);
        if count > self.options.max_elements {
            return "{...}".into();
        }
        match element_strings(t) {
            Some(items) => format!("{{{}}}", items.join(",")),
            None => "{...}".into(),
        }
    }
}

fn ref_type_name(value: &AttrValue) -> &'static str {
    let AttrValue::Ref { kind, .. } = value else {
        return value.type_name();
    };
    match kind {
        1 => "float",
        2 => "int",
        3 => "string",
        4 => "tensor",
        5 => "graph",
        11 => "sparse_tensor",
        13 => "type_proto",
        6 => "floats",
        7 => "ints",
        8 => "strings",
        9 => "tensors",
        10 => "graphs",
        12 => "sparse_tensors",
        14 => "type_protos",
        _ => "undefined",
    }
}

/// The elements of a small tensor as text, `None` for types printed elided.
fn element_strings(t: &StoredTensor) -> Option<Vec<String>> {
    if let Payload::String(v) = &t.payload {
        return Some(
            v.iter()
                .map(|s| quote(&String::from_utf8_lossy(s)))
                .collect(),
        );
    }
    let bytes = t.le_bytes().ok()?;
    let b = bytes.as_ref();
    macro_rules! each {
        ($n:expr, $f:expr) => {
            b.chunks_exact($n)
                .map(|c| $f(c.try_into().unwrap_or([0; $n])))
                .collect()
        };
    }
    Some(match t.elem {
        DataType::Float => each!(4, |c| float32(f32::from_le_bytes(c))),
        DataType::Double => each!(8, |c| float(f64::from_le_bytes(c))),
        DataType::Float16 => each!(2, |c| float(half::f16::from_le_bytes(c).to_f64())),
        DataType::Bfloat16 => each!(2, |c| float(half::bf16::from_le_bytes(c).to_f64())),
        DataType::Int64 => each!(8, |c| i64::from_le_bytes(c).to_string()),
        DataType::Int32 => each!(4, |c| i32::from_le_bytes(c).to_string()),
        DataType::Int16 => each!(2, |c| i16::from_le_bytes(c).to_string()),
        DataType::Int8 => each!(1, |c: [u8; 1]| (c[0] as i8).to_string()),
        DataType::Uint64 => each!(8, |c| u64::from_le_bytes(c).to_string()),
        DataType::Uint32 => each!(4, |c| u32::from_le_bytes(c).to_string()),
        DataType::Uint16 => each!(2, |c| u16::from_le_bytes(c).to_string()),
        DataType::Uint8 => each!(1, |c: [u8; 1]| c[0].to_string()),
        DataType::Bool => each!(1, |c: [u8; 1]| (c[0] != 0).to_string()),
        _ => return None,
    })
}

/// Shortest text that reads back as the same `f32`.
fn float32(v: f32) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        float(v as f64)
    }
}

/// Shortest text that reads back as the same value, in the syntax's float form.
fn float(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{v}")
    }
}

fn list(s: &mut String, items: impl Iterator<Item = String>) {
    s.push('[');
    s.push_str(&items.collect::<Vec<_>>().join(", "));
    s.push(']');
}

fn opsets(imports: &[OpsetImport]) -> String {
    let items: Vec<String> = imports
        .iter()
        .map(|o| format!("{} : {}", quote(o.domain()), o.version))
        .collect();
    format!("[{}]", items.join(", "))
}

fn str_map(entries: &[(String, String)]) -> String {
    let items: Vec<String> = entries
        .iter()
        .map(|(k, v)| format!("{}: {}", quote(k), quote(v)))
        .collect();
    format!("[{}]", items.join(", "))
}

fn value_info(v: &ValueInfo) -> String {
    match &v.ty {
        Some(ty) if ty.kind != TypeKind::Unset => format!("{} {}", type_to_text(ty), id(&v.name)),
        _ => id(&v.name),
    }
}

/// A tensor constant's type: `float[2,3]`, or `int64` for a scalar, as the syntax writes them.
fn tensor_type(elem: DataType, dims: &[i64]) -> String {
    if dims.is_empty() {
        return elem.name().to_owned();
    }
    let dims: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("{elem}[{}]", dims.join(","))
}

fn write_type(s: &mut String, ty: &Type) {
    let tensor = |s: &mut String, t: &crate::ir::TensorType| {
        match t.elem {
            Some(e) => s.push_str(e.name()),
            None => s.push_str("undefined"),
        }
        match &t.shape {
            None => s.push_str("[]"),
            Some(shape) if shape.dims.is_empty() => {}
            Some(shape) => {
                let dims: Vec<String> = shape
                    .dims
                    .iter()
                    .map(|d| match d {
                        Dim::Symbolic(p) => id(p),
                        other => other.to_string(),
                    })
                    .collect();
                let _ = write!(s, "[{}]", dims.join(","));
            }
        }
    };
    match &ty.kind {
        TypeKind::Tensor(t) => tensor(s, t),
        TypeKind::SparseTensor(t) => {
            s.push_str("sparse_tensor(");
            tensor(s, t);
            s.push(')');
        }
        TypeKind::Sequence(e) => {
            s.push_str("seq(");
            if let Some(e) = e {
                write_type(s, e);
            }
            s.push(')');
        }
        TypeKind::Optional(e) => {
            s.push_str("optional(");
            if let Some(e) = e {
                write_type(s, e);
            }
            s.push(')');
        }
        TypeKind::Map { key, value } => {
            let key = key
                .and_then(DataType::from_onnx)
                .map_or("undefined", DataType::name);
            let _ = write!(s, "map({key}, ");
            if let Some(v) = value {
                write_type(s, v);
            }
            s.push(')');
        }
        TypeKind::Opaque { domain, name } => {
            let _ = write!(s, "opaque({domain}, {name})");
        }
        TypeKind::Unset => s.push_str("undefined"),
    }
}

/// An identifier as the syntax needs it: bare when it is a plain identifier, quoted otherwise.
fn id(name: &str) -> String {
    let mut chars = name.chars();
    let plain = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if plain {
        name.to_owned()
    } else {
        quote(name)
    }
}

/// A string literal: quotes and backslashes escaped, control characters as `\xHH`.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            // A name is text from a stranger: ESC, CR or BEL printed raw would drive the terminal
            // that shows it.
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
