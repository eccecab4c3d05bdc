//! Hostile and malformed model files: each one is refused with an error that names what is wrong
//! (the tensor, node, value or file), and refusing it writes nothing.
//!
//! Every model here is built byte by byte with a small protobuf writer, so cases the library's
//! own types cannot express (negative dims, unknown element types, two data fields) are as easy
//! to build as valid ones. Each case runs the real binary as a user would,
//! `multigather rewrite bad.onnx -o out.onnx` in a scratch directory, and checks exit code 2, a
//! single `error:` line on stderr containing the expected words, no `out.onnx`, no temporary files
//! left behind, and every file in the directory (the input included) unchanged.
//!
//! Inputs found by fuzzing (`fuzz/`) have their regression tests in `tests/fuzz_regressions.rs`.

#[path = "malformed/harness.rs"]
mod harness;

use std::path::Path;
use std::process::Command;

use harness::{run_in, snapshot};
use pb::Msg;

/// A minimal protobuf writer: enough of the wire format to spell any ONNX message by hand.
mod pb {
    /// An encoded message under construction; fields are appended in call order.
    #[derive(Clone, Debug, Default)]
    pub struct Msg(pub Vec<u8>);

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    impl Msg {
        pub fn new() -> Msg {
            Msg::default()
        }

        fn key(&mut self, field: u32, wire: u8) {
            varint(&mut self.0, (u64::from(field) << 3) | u64::from(wire));
        }

        /// A varint field (int32, int64, enum): negative values as ten-byte two's complement.
        pub fn int(mut self, field: u32, v: i64) -> Msg {
            self.key(field, 0);
            varint(&mut self.0, v as u64);
            self
        }

        /// A length-delimited field holding `bytes`.
        pub fn bytes(mut self, field: u32, bytes: &[u8]) -> Msg {
            self.key(field, 2);
            varint(&mut self.0, bytes.len() as u64);
            self.0.extend_from_slice(bytes);
            self
        }

        /// A string field.
        pub fn str(self, field: u32, s: &str) -> Msg {
            self.bytes(field, s.as_bytes())
        }

        /// One string field per item (a repeated string).
        pub fn strs(self, field: u32, items: &[&str]) -> Msg {
            items.iter().fold(self, |m, s| m.str(field, s))
        }

        /// A nested message.
        pub fn msg(self, field: u32, m: Msg) -> Msg {
            self.bytes(field, &m.0)
        }

        /// One nested message per item (a repeated message).
        pub fn msgs(self, field: u32, items: impl IntoIterator<Item = Msg>) -> Msg {
            items.into_iter().fold(self, |m, item| m.msg(field, item))
        }

        /// A packed repeated varint field.
        pub fn packed(self, field: u32, values: &[i64]) -> Msg {
            let mut body = Vec::new();
            for &v in values {
                varint(&mut body, v as u64);
            }
            self.bytes(field, &body)
        }

        /// A packed repeated float field.
        pub fn floats(self, field: u32, values: &[f32]) -> Msg {
            let body: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            self.bytes(field, &body)
        }

        /// A length-delimited field whose length prefix claims `len` bytes but is followed by
        /// `actual` only: a lie about the size that a decoder must catch without allocating.
        pub fn lying_len(mut self, field: u32, len: u64, actual: &[u8]) -> Msg {
            self.key(field, 2);
            varint(&mut self.0, len);
            self.0.extend_from_slice(actual);
            self
        }
    }
}

/// ONNX element type codes used below.
const FLOAT: i64 = 1;
const INT64: i64 = 7;
const STRING: i64 = 8;

/// `AttributeProto.AttributeType` codes used below.
const AT_INT: i64 = 2;
const AT_STRING: i64 = 3;
const AT_TENSOR: i64 = 4;
const AT_GRAPH: i64 = 5;

/// A `TensorProto` header: name, element type and dims, no data yet.
fn tensor(name: &str, elem: i64, dims: &[i64]) -> Msg {
    Msg::new().packed(1, dims).int(2, elem).str(8, name)
}

/// Adds `raw_data` to a tensor.
fn with_raw(t: Msg, bytes: &[u8]) -> Msg {
    t.bytes(9, bytes)
}

/// Marks a tensor's data as external with the given `external_data` entries.
fn with_external(t: Msg, entries: &[(&str, &str)]) -> Msg {
    entries
        .iter()
        .fold(t, |t, (k, v)| t.msg(13, Msg::new().str(1, k).str(2, v)))
        .int(14, 1)
}

/// A `ValueInfoProto` of a tensor type with known dims.
fn value(name: &str, elem: i64, dims: &[i64]) -> Msg {
    let shape = dims
        .iter()
        .fold(Msg::new(), |s, &d| s.msg(1, Msg::new().int(1, d)));
    let tensor_type = Msg::new().int(1, elem).msg(2, shape);
    Msg::new()
        .str(1, name)
        .msg(2, Msg::new().msg(1, tensor_type))
}

/// A `NodeProto` of the default domain.
fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> Msg {
    Msg::new()
        .strs(1, inputs)
        .strs(2, outputs)
        .str(3, name)
        .str(4, op)
}

fn attr_int(name: &str, v: i64) -> Msg {
    Msg::new().str(1, name).int(20, AT_INT).int(3, v)
}

fn attr_string(name: &str, v: &str) -> Msg {
    Msg::new().str(1, name).int(20, AT_STRING).str(4, v)
}

fn attr_graph(name: &str, g: Msg) -> Msg {
    Msg::new().str(1, name).int(20, AT_GRAPH).msg(6, g)
}

fn attr_tensor(name: &str, t: Msg) -> Msg {
    Msg::new().str(1, name).int(20, AT_TENSOR).msg(5, t)
}

/// The parts of a `GraphProto`.
#[derive(Clone, Default)]
struct G {
    name: String,
    nodes: Vec<Msg>,
    initializers: Vec<Msg>,
    inputs: Vec<Msg>,
    outputs: Vec<Msg>,
}

impl G {
    fn encode(self) -> Msg {
        Msg::new()
            .msgs(1, self.nodes)
            .str(2, &self.name)
            .msgs(5, self.initializers)
            .msgs(11, self.inputs)
            .msgs(12, self.outputs)
    }
}

/// An `OperatorSetIdProto`.
fn opset(domain: &str, version: i64) -> Msg {
    Msg::new().str(1, domain).int(2, version)
}

/// A `ModelProto` importing the default domain at opset 13, plus `extra` imports and functions.
fn model_with(graph: Msg, extra_opsets: Vec<Msg>, functions: Vec<Msg>) -> Vec<u8> {
    Msg::new()
        .int(1, 8)
        .msgs(8, std::iter::once(opset("", 13)).chain(extra_opsets))
        .str(2, "malformed-tests")
        .msg(7, graph)
        .msgs(25, functions)
        .0
}

fn model(graph: Msg) -> Vec<u8> {
    model_with(graph, Vec::new(), Vec::new())
}

/// The 3 x 2 float table the base model looks rows up in.
fn table_bytes() -> Vec<u8> {
    (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect()
}

/// The base model: `out = Gather(table, ids)` with `table` an initializer given by the caller.
/// With [`good_table`] it is valid and rewrites; each case breaks one thing.
fn lookup_graph(table: Msg) -> G {
    G {
        name: "lookup_graph".into(),
        nodes: vec![
            node("Gather", "lookup", &["table", "ids"], &["out"]).msg(5, attr_int("axis", 0))
        ],
        initializers: vec![table],
        inputs: vec![value("ids", INT64, &[2])],
        outputs: vec![value("out", FLOAT, &[2, 2])],
    }
}

fn good_table() -> Msg {
    with_raw(tensor("table", FLOAT, &[3, 2]), &table_bytes())
}

/// The base model with `table` replaced.
fn lookup_model(table: Msg) -> Vec<u8> {
    model(lookup_graph(table).encode())
}

/// The base model with its table stored externally with the given entries.
fn external_model(entries: &[(&str, &str)]) -> Vec<u8> {
    lookup_model(with_external(tensor("table", FLOAT, &[3, 2]), entries))
}

// ---------------------------------------------------------------------------------------------
// The harness.

/// Runs `multigather rewrite bad.onnx -o out.onnx` in `dir` and checks that it was refused with
/// an error containing every one of `expected`, and that nothing in `dir` changed.
fn assert_refused_in(dir: &Path, expected: &[&str]) -> String {
    let before = snapshot(dir);
    let run = run_in(dir, &["rewrite", "bad.onnx", "-o", "out.onnx"]);
    run.assert_error(expected);
    let err = run.stderr;
    assert!(err.contains("bad.onnx"), "the error names the file: {err}");
    assert!(!dir.join("out.onnx").exists(), "no output is written");
    assert_eq!(snapshot(dir), before, "the directory is unchanged");
    err
}

/// A scratch directory holding `bytes` as `bad.onnx`.
fn scratch(bytes: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.onnx"), bytes).unwrap();
    dir
}

/// Writes `bytes` as `bad.onnx` in a fresh directory and checks it is refused.
fn assert_refused(bytes: &[u8], expected: &[&str]) -> String {
    let dir = scratch(bytes);
    assert_refused_in(dir.path(), expected)
}

/// A model with external data, its data file `weights.bin` (the 24-byte table) beside it.
fn with_weights(bytes: &[u8]) -> tempfile::TempDir {
    let dir = scratch(bytes);
    std::fs::write(dir.path().join("weights.bin"), table_bytes()).unwrap();
    dir
}

// ---------------------------------------------------------------------------------------------
// Controls: the base models are accepted, so each refusal below is caused by its one defect.

#[test]
fn control_the_base_model_rewrites() {
    let dir = scratch(&lookup_model(good_table()));
    let run = run_in(dir.path(), &["rewrite", "bad.onnx", "-o", "out.onnx"]);
    run.assert_success();
    assert!(dir.path().join("out.onnx").exists());
}

#[test]
fn control_the_external_data_model_rewrites() {
    let dir = with_weights(&external_model(&[("location", "weights.bin")]));
    let run = run_in(dir.path(), &["rewrite", "bad.onnx", "-o", "out.onnx"]);
    run.assert_success();
    let out = multigather::io::load(dir.path().join("out.onnx")).unwrap();
    let table = out.graph.initializer("table").unwrap();
    assert_eq!(table.le_bytes().unwrap().as_ref(), table_bytes().as_slice());
}

// ---------------------------------------------------------------------------------------------
// Not a protobuf message.

#[test]
fn truncated_protobuf() {
    let good = lookup_model(good_table());
    for cut in [1, good.len() / 3, good.len() / 2, good.len() - 1] {
        assert_refused(&good[..cut], &["not a valid ONNX model"]);
    }
}

#[test]
fn garbage_bytes() {
    assert_refused(b"\xff\xff\xff\xff not a model", &["not a valid ONNX model"]);
    assert_refused(
        b"PK\x03\x04 a zip file, not a model",
        &["not a valid ONNX model"],
    );
}

#[test]
fn empty_file() {
    assert_refused(b"", &["the model has no graph"]);
}

#[test]
fn invalid_utf8_in_a_name() {
    let g = lookup_graph(good_table()).encode();
    let bad = Msg::new().msg(7, g.bytes(2, b"\xff\xfe"));
    assert_refused(&bad.0, &["not a valid ONNX model", "GraphProto.name"]);
}

#[test]
fn length_prefix_far_past_the_end() {
    // raw_data claims 1 TiB in a file of a few hundred bytes.
    let table = tensor("table", FLOAT, &[3, 2]).lying_len(9, 1 << 40, &table_bytes());
    assert_refused(&lookup_model(table), &["not a valid ONNX model"]);
    // A packed dims field claiming more bytes than the message holds.
    let table = Msg::new().lying_len(1, 1 << 62, &[3, 2]);
    assert_refused(&lookup_model(table), &["not a valid ONNX model"]);
}

// ---------------------------------------------------------------------------------------------
// Nesting and size limits.

/// A graph nested `depth` levels deep: each level holds one `If` whose then-branch is the next.
fn nested_ifs(depth: usize) -> Msg {
    let leaf = G {
        name: format!("level_{depth}"),
        nodes: vec![node("Identity", "leaf", &["c"], &["r"])],
        outputs: vec![value("r", 9, &[])],
        ..G::default()
    };
    (0..depth).rev().fold(leaf.encode(), |inner, level| {
        let empty = G {
            name: format!("else_{level}"),
            nodes: vec![node("Identity", "e", &["c"], &["r"])],
            outputs: vec![value("r", 9, &[])],
            ..G::default()
        };
        let if_node = node("If", &format!("if_{level}"), &["c"], &["r"])
            .msg(5, attr_graph("then_branch", inner))
            .msg(5, attr_graph("else_branch", empty.encode()));
        G {
            name: format!("level_{level}"),
            nodes: vec![if_node],
            inputs: if level == 0 {
                vec![value("c", 9, &[])]
            } else {
                vec![]
            },
            outputs: vec![value("r", 9, &[])],
            ..G::default()
        }
        .encode()
    })
}

#[test]
fn deep_if_nesting_is_refused_without_overflowing_the_stack() {
    // Far deeper than any limit; decoding must stop early rather than recurse 5000 times.
    assert_refused(
        &model(nested_ifs(5_000)),
        &["not a valid ONNX model", "recursion limit"],
    );
}

#[test]
fn shallow_if_nesting_loads() {
    let bytes = model(nested_ifs(10));
    let model = multigather::io::load_bytes(&bytes).unwrap();
    model.validate().unwrap();
}

#[test]
fn nesting_deeper_than_the_configured_limit() {
    let dir = scratch(&model(nested_ifs(10)));
    let options = multigather::io::LoadOptions {
        max_depth: 4,
        ..Default::default()
    };
    let err = multigather::io::load_with(&dir.path().join("bad.onnx"), &options)
        .unwrap_err()
        .to_string();
    // The error leads through the nodes that hold the graphs, down to the one too deep.
    assert!(
        err.starts_with("node 'if_0' (If): node 'if_1' (If): "),
        "{err}"
    );
    assert!(
        err.ends_with("limit exceeded: graph 'level_4' is nested more than 4 levels deep"),
        "{err}"
    );
}

#[test]
fn deep_type_nesting() {
    // sequence(sequence(...(float))) 20000 levels deep in a graph input's type.
    let mut ty = Msg::new().msg(1, Msg::new().int(1, FLOAT));
    for _ in 0..20_000 {
        ty = Msg::new().msg(4, Msg::new().msg(1, ty));
    }
    let mut g = lookup_graph(good_table());
    g.inputs.push(Msg::new().str(1, "deep").msg(2, ty));
    assert_refused(
        &model(g.encode()),
        &["not a valid ONNX model", "recursion limit"],
    );
}

#[test]
fn more_nodes_than_the_configured_limit() {
    let dir = scratch(&lookup_model(good_table()));
    let options = multigather::io::LoadOptions {
        max_nodes: 0,
        ..Default::default()
    };
    let err = multigather::io::load_with(&dir.path().join("bad.onnx"), &options)
        .unwrap_err()
        .to_string();
    assert_eq!(err, "limit exceeded: the model has more than 0 nodes");
}

#[test]
fn file_larger_than_the_configured_limit() {
    let dir = scratch(&lookup_model(good_table()));
    let options = multigather::io::LoadOptions {
        max_file_bytes: 10,
        ..Default::default()
    };
    let err = multigather::io::load_with(&dir.path().join("bad.onnx"), &options)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad.onnx") && err.contains("larger than the limit of 10 bytes"),
        "{err}"
    );
}

/// A chain of `n` Identity nodes feeding a Gather, as encoded bytes.
fn identity_chain(n: usize) -> Vec<u8> {
    let mut nodes = Vec::with_capacity(n + 1);
    for i in 0..n {
        let (a, b) = (format!("v{i}"), format!("v{}", i + 1));
        nodes.push(node(
            "Identity",
            &format!("n{i}"),
            &[a.as_str()],
            &[b.as_str()],
        ));
    }
    let last = format!("v{n}");
    nodes.push(node("Gather", "lookup", &[last.as_str(), "ids"], &["out"]));
    let g = G {
        name: "chain".into(),
        nodes,
        inputs: vec![value("v0", FLOAT, &[3, 2]), value("ids", INT64, &[2])],
        outputs: vec![value("out", FLOAT, &[2, 2])],
        ..G::default()
    };
    model(g.encode())
}

#[test]
fn million_node_chain_loads_validates_and_rewrites() {
    // Run on a thread with a deliberately small stack: anything recursive per node would
    // overflow it long before a million nodes.
    let bytes = identity_chain(1_000_000);
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let mut model = multigather::io::load_bytes(&bytes).unwrap();
            assert_eq!(model.graph.node_count(), 1_000_001);
            model.validate().unwrap();
            let report = multigather::pass::GatherToMultiaxis::rewrite(
                &mut model,
                multigather::pass::RewriteConfig::default(),
            )
            .unwrap();
            assert_eq!(report.rewritten, 1);
            let again = multigather::io::to_bytes(&model).unwrap();
            drop(model);
            assert!(again.len() > bytes.len());
        })
        .unwrap()
        .join()
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Tensors.

#[test]
fn undefined_element_type() {
    let table = with_raw(tensor("table", 0, &[3, 2]), &table_bytes());
    assert_refused(
        &lookup_model(table),
        &["tensor 'table'", "element type is UNDEFINED"],
    );
    // data_type left out entirely.
    let table = with_raw(
        Msg::new().packed(1, &[3, 2]).str(8, "table"),
        &table_bytes(),
    );
    assert_refused(
        &lookup_model(table),
        &["tensor 'table'", "element type is UNDEFINED"],
    );
}

#[test]
fn unknown_element_type() {
    let table = with_raw(tensor("table", 99, &[3, 2]), &table_bytes());
    assert_refused(
        &lookup_model(table),
        &["tensor 'table'", "unknown element type 99"],
    );
    let table = with_raw(tensor("table", -1, &[3, 2]), &table_bytes());
    assert_refused(
        &lookup_model(table),
        &["tensor 'table'", "unknown element type -1"],
    );
}

#[test]
fn unknown_element_type_in_a_declared_type() {
    let mut g = lookup_graph(good_table());
    g.inputs = vec![value("ids", 77, &[2])];
    assert_refused(
        &model(g.encode()),
        &["value 'ids'", "unknown element type 77"],
    );
}

#[test]
fn negative_dims() {
    let table = with_raw(tensor("table", FLOAT, &[-3, -2]), &table_bytes());
    assert_refused(
        &lookup_model(table),
        &["tensor 'table'", "negative dimension -3"],
    );
}

#[test]
fn element_count_overflows() {
    let table = with_raw(
        tensor("table", FLOAT, &[i64::MAX, i64::MAX, 4]),
        &table_bytes(),
    );
    assert_refused(
        &lookup_model(table),
        &["tensor 'table'", "element count", "overflows"],
    );
}

#[test]
fn byte_size_overflows() {
    // 2^62 elements fit in usize; 2^62 x 4 bytes do not.
    let table = with_raw(tensor("table", FLOAT, &[1 << 31, 1 << 31]), &table_bytes());
    assert_refused(
        &lookup_model(table),
        &["tensor 'table'", "byte size", "overflows"],
    );
    // The same through a typed field, where complex64 needs two floats per element.
    let t = tensor("table", 14, &[1 << 62, 2]).floats(4, &[1.0, 2.0]);
    assert_refused(&lookup_model(t), &["tensor 'table'", "overflows"]);
}

#[test]
fn raw_data_shorter_than_the_dims() {
    let table = with_raw(tensor("table", FLOAT, &[3, 2]), &table_bytes()[..20]);
    assert_refused(
        &lookup_model(table),
        &["tensor 'table'", "need 24 bytes, found 20"],
    );
}

#[test]
fn raw_data_longer_than_the_dims() {
    let mut bytes = table_bytes();
    bytes.extend_from_slice(&[0; 4]);
    let table = with_raw(tensor("table", FLOAT, &[3, 2]), &bytes);
    assert_refused(
        &lookup_model(table),
        &["tensor 'table'", "need 24 bytes, found 28"],
    );
}

#[test]
fn huge_tensor_declared_by_a_tiny_file() {
    // 2^40 floats (4 TiB) declared, 24 bytes present: refused from the sizes alone.
    let table = with_raw(tensor("table", FLOAT, &[1 << 20, 1 << 20]), &table_bytes());
    assert_refused(&lookup_model(table), &["tensor 'table'", "found 24"]);
    // The same with no data field at all.
    let table = tensor("table", FLOAT, &[1 << 20, 1 << 20]);
    assert_refused(&lookup_model(table), &["tensor 'table'", "found 0"]);
    // And as a Constant's value, which the rewrite never needs to read.
    let mut g = lookup_graph(good_table());
    let value = with_raw(tensor("big", INT64, &[1 << 40]), &[0; 8]);
    g.nodes.insert(
        0,
        node("Constant", "c", &[], &["unused"]).msg(5, attr_tensor("value", value)),
    );
    assert_refused(&model(g.encode()), &["tensor 'big'", "found 8"]);
}

#[test]
fn typed_field_length_mismatch() {
    let table = tensor("table", FLOAT, &[3, 2]).floats(4, &[1.0, 2.0, 3.0]);
    assert_refused(
        &lookup_model(table),
        &["tensor 'table'", "need 6 float_data, found 3"],
    );
    let idx = tensor("table", INT64, &[3, 2]).packed(7, &[1; 7]);
    assert_refused(
        &lookup_model(idx),
        &["tensor 'table'", "need 6 int64_data, found 7"],
    );
}

#[test]
fn typed_field_of_the_wrong_type() {
    let t = tensor("table", INT64, &[3, 2]).floats(4, &[0.0; 6]);
    assert_refused(
        &lookup_model(t),
        &["tensor 'table'", "int64 tensor stored in float_data"],
    );
}

#[test]
fn two_data_fields() {
    let t = with_raw(tensor("table", FLOAT, &[3, 2]), &table_bytes()).floats(4, &[0.0; 6]);
    assert_refused(
        &lookup_model(t),
        &[
            "tensor 'table'",
            "more than one data field set: raw_data, float_data",
        ],
    );
    let t = with_external(
        with_raw(tensor("table", FLOAT, &[3, 2]), &table_bytes()),
        &[("location", "weights.bin")],
    );
    let dir = with_weights(&lookup_model(t));
    assert_refused_in(
        dir.path(),
        &["tensor 'table'", "external data and raw_data are both set"],
    );
}

#[test]
fn string_tensor_in_raw_data() {
    let t = with_raw(tensor("table", STRING, &[3, 2]), b"abcdef");
    assert_refused(
        &lookup_model(t),
        &["tensor 'table'", "string tensors cannot use raw"],
    );
}

#[test]
fn string_tensor_with_too_few_strings() {
    let t = tensor("table", STRING, &[3]).str(6, "a").str(6, "b");
    assert_refused(
        &lookup_model(t),
        &["tensor 'table'", "need 3 strings, found 2"],
    );
}

#[test]
fn unknown_data_location() {
    let t = with_raw(tensor("table", FLOAT, &[3, 2]), &table_bytes()).int(14, 7);
    assert_refused(
        &lookup_model(t),
        &["tensor 'table'", "unknown data_location 7"],
    );
}

// ---------------------------------------------------------------------------------------------
// Attributes.

#[test]
fn unknown_attribute_type() {
    let mut g = lookup_graph(good_table());
    g.nodes[0] = node("Gather", "lookup", &["table", "ids"], &["out"])
        .msg(5, Msg::new().str(1, "axis").int(20, 99).int(3, 0));
    assert_refused(
        &model(g.encode()),
        &["node 'lookup'", "unknown attribute type 99"],
    );
}

#[test]
fn attribute_without_a_value() {
    let mut g = lookup_graph(good_table());
    g.nodes[0] =
        node("Gather", "lookup", &["table", "ids"], &["out"]).msg(5, Msg::new().str(1, "axis"));
    assert_refused(
        &model(g.encode()),
        &["node 'lookup'", "attribute 'axis'", "has no value"],
    );
}

#[test]
fn graph_attribute_without_a_graph() {
    let mut g = lookup_graph(good_table());
    g.nodes.insert(
        0,
        node("If", "branch", &["ids"], &["x"])
            .msg(5, Msg::new().str(1, "then_branch").int(20, AT_GRAPH)),
    );
    assert_refused(
        &model(g.encode()),
        &["node 'branch'", "graph attribute without a graph"],
    );
}

#[test]
fn gather_axis_of_the_wrong_type() {
    let mut g = lookup_graph(good_table());
    g.nodes[0] =
        node("Gather", "lookup", &["table", "ids"], &["out"]).msg(5, attr_string("axis", "0"));
    assert_refused(&model(g.encode()), &["node 'lookup'", "axis", "int"]);
}

#[test]
fn attribute_given_twice() {
    let mut g = lookup_graph(good_table());
    g.nodes[0] = node("Gather", "lookup", &["table", "ids"], &["out"])
        .msg(5, attr_int("axis", 0))
        .msg(5, attr_int("axis", 1));
    assert_refused(
        &model(g.encode()),
        &["node 'lookup' (Gather): attribute 'axis' is given twice"],
    );
}

#[test]
fn gather_with_one_input() {
    let mut g = lookup_graph(good_table());
    g.nodes[0] = node("Gather", "lookup", &["table"], &["out"]);
    assert_refused(
        &model(g.encode()),
        &["node 'lookup'", "takes 2 inputs, found 1"],
    );
}

#[test]
fn gather_with_three_inputs() {
    let mut g = lookup_graph(good_table());
    g.nodes[0] = node("Gather", "lookup", &["table", "ids", "ids"], &["out"]);
    assert_refused(
        &model(g.encode()),
        &["node 'lookup'", "takes 2 inputs, found 3"],
    );
}

#[test]
fn gather_with_two_outputs() {
    let mut g = lookup_graph(good_table());
    g.nodes[0] = node("Gather", "lookup", &["table", "ids"], &["out", "extra"]);
    assert_refused(&model(g.encode()), &["node 'lookup'", "outputs, found 2"]);
}

// ---------------------------------------------------------------------------------------------
// External data.

#[test]
fn external_location_with_parent_components() {
    for location in [
        "../weights.bin",
        "a/../../weights.bin",
        "sub/../weights.bin",
        "..",
    ] {
        let dir = with_weights(&external_model(&[("location", location)]));
        assert_refused_in(
            dir.path(),
            &["tensor 'table'", "external data", "'..' component"],
        );
    }
}

#[test]
fn external_location_absolute() {
    let dir = with_weights(&external_model(&[("location", "/etc/passwd")]));
    assert_refused_in(dir.path(), &["tensor 'table'", "absolute path"]);
    let dir = with_weights(&external_model(&[("location", "//server/share/w.bin")]));
    assert_refused_in(dir.path(), &["tensor 'table'", "absolute path"]);
}

#[test]
fn external_location_with_a_drive_letter() {
    for location in ["C:/weights.bin", "c:weights.bin"] {
        let dir = with_weights(&external_model(&[("location", location)]));
        assert_refused_in(dir.path(), &["tensor 'table'", "drive letter"]);
    }
}

#[test]
fn external_location_with_a_backslash() {
    for location in ["..\\weights.bin", "sub\\weights.bin"] {
        let dir = with_weights(&external_model(&[("location", location)]));
        assert_refused_in(dir.path(), &["tensor 'table'", "backslash"]);
    }
}

#[test]
fn external_location_with_a_nul_byte() {
    let dir = with_weights(&external_model(&[("location", "weights.bin\0.txt")]));
    assert_refused_in(dir.path(), &["tensor 'table'", "NUL byte"]);
}

#[test]
fn external_location_empty_or_missing() {
    let dir = with_weights(&external_model(&[("location", "")]));
    assert_refused_in(dir.path(), &["tensor 'table'", "location is empty"]);
    let dir = with_weights(&external_model(&[("offset", "0")]));
    assert_refused_in(dir.path(), &["tensor 'table'", "no 'location' key"]);
}

#[test]
fn external_location_given_twice() {
    let dir = with_weights(&external_model(&[
        ("location", "weights.bin"),
        ("location", "other.bin"),
    ]));
    assert_refused_in(dir.path(), &["tensor 'table'", "'location' is given twice"]);
}

#[test]
fn external_file_is_a_symlink() {
    let dir = with_weights(&external_model(&[("location", "link.bin")]));
    std::os::unix::fs::symlink("weights.bin", dir.path().join("link.bin")).unwrap();
    assert_refused_in(dir.path(), &["tensor 'table'", "link.bin", "symbolic link"]);
}

#[test]
fn external_file_under_a_symlinked_directory() {
    let dir = scratch(&external_model(&[("location", "sub/weights.bin")]));
    let real = tempfile::tempdir().unwrap();
    std::fs::write(real.path().join("weights.bin"), table_bytes()).unwrap();
    std::os::unix::fs::symlink(real.path(), dir.path().join("sub")).unwrap();
    assert_refused_in(dir.path(), &["tensor 'table'", "sub", "symbolic link"]);
}

#[test]
fn external_file_is_a_hard_link() {
    let dir = with_weights(&external_model(&[("location", "weights.bin")]));
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::hard_link(dir.path().join("weights.bin"), elsewhere.join("copy.bin")).unwrap();
    assert_refused_in(
        dir.path(),
        &["tensor 'table'", "weights.bin", "hard link (2 links)"],
    );
}

#[test]
fn external_file_is_a_directory() {
    let dir = with_weights(&external_model(&[("location", "sub")]));
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    assert_refused_in(
        dir.path(),
        &["tensor 'table'", "'sub' is not a regular file"],
    );
}

#[test]
fn external_file_is_a_fifo() {
    // Opening a FIFO for reading blocks until a writer comes; the loader must not even try.
    let dir = with_weights(&external_model(&[("location", "pipe")]));
    let status = Command::new("mkfifo")
        .arg(dir.path().join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    assert_refused_in(
        dir.path(),
        &["tensor 'table'", "'pipe' is not a regular file"],
    );
}

#[test]
fn external_file_missing() {
    let dir = scratch(&external_model(&[("location", "missing.bin")]));
    assert_refused_in(
        dir.path(),
        &["tensor 'table'", "'missing.bin'", "No such file"],
    );
}

#[test]
fn external_offset_negative_or_not_a_number() {
    for (key, value) in [
        ("offset", "-8"),
        ("offset", "abc"),
        ("offset", "0x10"),
        ("offset", "18446744073709551616"),
        ("length", "-24"),
        ("length", "24.0"),
        ("length", ""),
    ] {
        let dir = with_weights(&external_model(&[
            ("location", "weights.bin"),
            (key, value),
        ]));
        let expected = format!("{key} '{value}' is not a non-negative integer");
        assert_refused_in(dir.path(), &["tensor 'table'", &expected]);
    }
}

#[test]
fn external_offset_past_the_end() {
    let dir = with_weights(&external_model(&[
        ("location", "weights.bin"),
        ("offset", "100"),
    ]));
    assert_refused_in(
        dir.path(),
        &[
            "tensor 'table'",
            "offset 100 is past the end of 'weights.bin' (24 bytes)",
        ],
    );
    let dir = with_weights(&external_model(&[
        ("location", "weights.bin"),
        ("offset", "18446744073709551615"),
        ("length", "1"),
    ]));
    assert_refused_in(dir.path(), &["tensor 'table'", "past the end"]);
}

#[test]
fn external_length_past_the_end() {
    let dir = with_weights(&external_model(&[
        ("location", "weights.bin"),
        ("offset", "8"),
        ("length", "24"),
    ]));
    assert_refused_in(
        dir.path(),
        &["tensor 'table'", "offset 8 + length 24 is past the end"],
    );
}

#[test]
fn external_length_not_matching_the_tensor() {
    let dir = with_weights(&external_model(&[
        ("location", "weights.bin"),
        ("length", "16"),
    ]));
    assert_refused_in(dir.path(), &["tensor 'table'", "need 24 bytes, found 16"]);
    // Without a length, the rest of the file is the tensor, and here there is too much of it.
    let dir = with_weights(&external_model(&[("location", "weights.bin")]));
    std::fs::write(dir.path().join("weights.bin"), [0u8; 32]).unwrap();
    assert_refused_in(dir.path(), &["tensor 'table'", "need 24 bytes, found 32"]);
}

#[test]
fn external_data_with_an_unknown_key() {
    let dir = with_weights(&external_model(&[
        ("location", "weights.bin"),
        ("compression", "zstd"),
    ]));
    assert_refused_in(dir.path(), &["tensor 'table'", "unknown key 'compression'"]);
}

#[test]
fn external_string_tensor() {
    let t = with_external(
        tensor("table", STRING, &[3, 2]),
        &[("location", "weights.bin")],
    );
    let dir = with_weights(&lookup_model(t));
    assert_refused_in(
        dir.path(),
        &[
            "tensor 'table'",
            "string tensors cannot use raw or external data",
        ],
    );
}

#[test]
fn external_data_in_a_model_loaded_from_bytes() {
    let err = multigather::io::load_bytes(&external_model(&[("location", "weights.bin")]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tensor 'table': external data") && err.contains("loaded from bytes"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Graphs.

#[test]
fn undefined_input() {
    let mut g = lookup_graph(good_table());
    g.nodes[0] = node("Gather", "lookup", &["table", "nope"], &["out"]);
    assert_refused(
        &model(g.encode()),
        &[
            "graph 'lookup_graph'",
            "node 'lookup' (Gather) reads 'nope', which nothing defines",
        ],
    );
}

#[test]
fn undefined_outer_value_in_a_subgraph() {
    let then = G {
        name: "then".into(),
        nodes: vec![node("Identity", "inner", &["ghost"], &["r"])],
        outputs: vec![value("r", FLOAT, &[])],
        ..G::default()
    };
    let other = G {
        name: "else".into(),
        nodes: vec![node("Identity", "inner2", &["table"], &["r"])],
        outputs: vec![value("r", FLOAT, &[])],
        ..G::default()
    };
    let mut g = lookup_graph(good_table());
    g.inputs.push(value("c", 9, &[]));
    g.nodes.push(
        node("If", "branch", &["c"], &["x"])
            .msg(5, attr_graph("then_branch", then.encode()))
            .msg(5, attr_graph("else_branch", other.encode())),
    );
    assert_refused(&model(g.encode()), &["graph 'then'", "reads 'ghost'"]);
}

#[test]
fn graph_output_not_defined() {
    let mut g = lookup_graph(good_table());
    g.outputs.push(value("phantom", FLOAT, &[1]));
    assert_refused(
        &model(g.encode()),
        &["graph output 'phantom' is not defined"],
    );
}

#[test]
fn cycle() {
    let mut g = lookup_graph(good_table());
    g.nodes.push(node("Relu", "p", &["q_out"], &["p_out"]));
    g.nodes.push(node("Relu", "q", &["p_out"], &["q_out"]));
    assert_refused(&model(g.encode()), &["node 'p' is on a cycle"]);
}

#[test]
fn node_reading_its_own_output() {
    let mut g = lookup_graph(good_table());
    g.nodes.push(node("Add", "selfie", &["s", "s"], &["s"]));
    assert_refused(
        &model(g.encode()),
        &["node 'selfie' (Add) is on a cycle: it reads its own output 's'"],
    );
}

#[test]
fn duplicate_output_names() {
    let mut g = lookup_graph(good_table());
    g.nodes.push(node("Relu", "again", &["table"], &["out"]));
    assert_refused(
        &model(g.encode()),
        &["value 'out' is defined twice (again by node 'again')"],
    );
}

#[test]
fn node_output_shadowing_an_initializer() {
    let mut g = lookup_graph(good_table());
    g.nodes.push(node("Relu", "shadow", &["ids"], &["table"]));
    assert_refused(&model(g.encode()), &["value 'table' is defined twice"]);
}

#[test]
fn duplicate_graph_inputs() {
    let mut g = lookup_graph(good_table());
    g.inputs.push(value("ids", INT64, &[2]));
    assert_refused(
        &model(g.encode()),
        &["graph 'lookup_graph'", "'ids' is defined twice"],
    );
}

#[test]
fn duplicate_initializers() {
    let mut g = lookup_graph(good_table());
    g.initializers.push(good_table());
    assert_refused(
        &model(g.encode()),
        &["graph 'lookup_graph'", "'table' is defined twice"],
    );
}

#[test]
fn domain_without_an_opset_import() {
    let mut g = lookup_graph(good_table());
    g.nodes
        .push(node("Frob", "frob", &["out"], &["frobbed"]).str(7, "com.example"));
    assert_refused(
        &model(g.encode()),
        &["node 'frob'", "domain 'com.example' is not imported"],
    );
}

/// A model-local function `local.<name>` whose body calls `local.<callee>`.
fn function(name: &str, callee: &str) -> Msg {
    Msg::new()
        .str(1, name)
        .str(4, "x")
        .str(5, "y")
        .msg(7, node(callee, "call", &["x"], &["y"]).str(7, "local"))
        .msg(9, opset("", 13))
        .msg(9, opset("local", 1))
        .str(10, "local")
}

/// The base model with one more node calling `local.f`, and the given functions.
fn calling_model(functions: Vec<Msg>) -> Vec<u8> {
    let mut g = lookup_graph(good_table());
    g.nodes
        .push(node("f", "call_f", &["out"], &["f_out"]).str(7, "local"));
    model_with(g.encode(), vec![opset("local", 1)], functions)
}

#[test]
fn recursive_function() {
    assert_refused(
        &calling_model(vec![function("f", "f")]),
        &["function 'local.f'", "recursive"],
    );
}

#[test]
fn mutually_recursive_functions() {
    assert_refused(
        &calling_model(vec![function("f", "g"), function("g", "f")]),
        &["function 'local.", "recursive"],
    );
}

#[test]
fn control_non_recursive_functions_load() {
    // `f` calls `g`, which calls a default-domain Relu.
    let g = Msg::new()
        .str(1, "g")
        .str(4, "x")
        .str(5, "y")
        .msg(7, node("Relu", "call", &["x"], &["y"]))
        .msg(9, opset("", 13))
        .str(10, "local");
    let bytes = calling_model(vec![function("f", "g"), g]);
    let model = multigather::io::load_bytes(&bytes).unwrap();
    model.validate().unwrap();
}

#[test]
fn function_attribute_default_with_a_bad_tensor() {
    // Defaults are tensors like any other: checked at load, and saved with the model.
    let bad = with_raw(tensor("default_w", FLOAT, &[3, 2]), &[0; 4]);
    let default = Msg::new().str(1, "w").int(20, 9).msg(10, bad);
    let g = Msg::new()
        .str(1, "f")
        .str(4, "x")
        .str(5, "y")
        .msg(7, node("Relu", "call", &["x"], &["y"]))
        .msg(9, opset("", 13))
        .str(10, "local")
        .msg(11, default);
    assert_refused(
        &calling_model(vec![g]),
        &["tensor 'default_w'", "need 24 bytes, found 4"],
    );
}

#[test]
fn function_defined_twice() {
    let g = Msg::new()
        .str(1, "f")
        .str(4, "x")
        .str(5, "y")
        .msg(7, node("Relu", "call", &["x"], &["y"]))
        .msg(9, opset("", 13))
        .str(10, "local");
    assert_refused(
        &calling_model(vec![g.clone(), g]),
        &["function 'f'", "defined twice"],
    );
}

// ---------------------------------------------------------------------------------------------
// Files that are not model files.

#[test]
fn input_is_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("bad.onnx")).unwrap();
    assert_refused_in(dir.path(), &["loading bad.onnx"]);
}

#[test]
fn input_missing() {
    let dir = tempfile::tempdir().unwrap();
    assert_refused_in(dir.path(), &["loading bad.onnx", "No such file"]);
}

// ---------------------------------------------------------------------------------------------
// Kernels on model-controlled values: every model below is all constants (no graph input), so
// `run` executes the kernel and `rewrite` and `verify` run it again through constant folding. The
// rule: the right result or a one-line error (exit 2), quickly, in bounded memory; never a panic
// (exit 101), an abort or a hang.

const BOOL: i64 = 9;

/// A float initializer of `dims` holding `values` (none for an empty tensor).
fn floats(name: &str, dims: &[i64], values: &[f32]) -> Msg {
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    with_raw(tensor(name, FLOAT, dims), &raw)
}

/// An int64 initializer of `dims` holding `values`.
fn int64s(name: &str, dims: &[i64], values: &[i64]) -> Msg {
    let raw: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    with_raw(tensor(name, INT64, dims), &raw)
}

fn attr_ints(name: &str, v: &[i64]) -> Msg {
    const AT_INTS: i64 = 7;
    v.iter()
        .fold(Msg::new().str(1, name).int(20, AT_INTS), |m, &x| {
            m.int(8, x)
        })
}

/// A model computing `outputs` from `initializers` with `nodes`, plus the base model's lookup so
/// that `rewrite` has a gather to rewrite, at the given default-domain opset.
fn constant_model(
    opset_version: i64,
    nodes: Vec<Msg>,
    initializers: Vec<Msg>,
    outputs: &[&str],
) -> Vec<u8> {
    let mut g = lookup_graph(good_table());
    g.name = "hostile".into();
    g.inputs.clear();
    g.initializers.push(int64s("ids", &[2], &[0, 2]));
    g.nodes.extend(nodes);
    g.initializers.extend(initializers);
    // Outputs without a declared type: the model states nothing it does not compute.
    g.outputs
        .extend(outputs.iter().map(|o| Msg::new().str(1, o)));
    Msg::new()
        .int(1, 8)
        .msg(8, opset("", opset_version))
        .str(2, "malformed-tests")
        .msg(7, g.encode())
        .0
}

/// Runs `args` in `dir` under a 4 GiB address-space limit, so an allocation sized by the model
/// fails instead of taking the machine.
fn run_bounded(dir: &Path, args: &[&str]) -> harness::Run {
    harness::run_under(dir, "ulimit -v 4194304", args)
}

/// What every command must do with a hostile constant model: `run` gives the right result
/// (`expected` on stdout) or fails with `expected` in a one-line error; `rewrite`, `verify` and
/// `lower` (of the rewrite) end with exit 0 or a one-line error, within `seconds` each. The
/// directory holds only what a successful rewrite writes.
fn check_kernel_case(bytes: &[u8], expected: &[&str], seconds: u64) {
    let dir = scratch(bytes);
    let before = snapshot(dir.path());
    let start = std::time::Instant::now();
    let run = run_bounded(dir.path(), &["run", "bad.onnx"]);
    let elapsed = start.elapsed().as_secs();
    assert!(elapsed <= seconds, "run took {elapsed} s");
    if run.code == Some(0) {
        let out = String::from_utf8_lossy(&run.stdout);
        for word in expected {
            assert!(out.contains(word), "expected {word:?} in: {out}");
        }
    } else {
        run.assert_error(expected);
    }
    for args in [
        &["rewrite", "bad.onnx", "-o", "out.onnx"][..],
        &["verify", "bad.onnx"],
        &["lower", "out.onnx", "-o", "lowered.onnx"],
    ] {
        if args[1] == "out.onnx" && !dir.path().join("out.onnx").exists() {
            continue;
        }
        let start = std::time::Instant::now();
        let other = run_bounded(dir.path(), args);
        let elapsed = start.elapsed().as_secs();
        assert!(elapsed <= seconds, "{args:?} took {elapsed} s");
        if other.code != Some(0) {
            other.assert_error(&[]);
        }
    }
    let mut after = snapshot(dir.path());
    after.remove("out.onnx");
    after.remove("lowered.onnx");
    assert_eq!(after, before, "nothing else is written");
}

fn pool_case(op: &str) -> Vec<u8> {
    let pool = node(op, "pool", &["x"], &["y"])
        .msg(5, attr_ints("kernel_shape", &[1, 1]))
        .msg(5, attr_ints("pads", &[1 << 62, 0, 1 << 62, 0]));
    constant_model(
        13,
        vec![pool],
        vec![floats("x", &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0])],
        &["y"],
    )
}

#[test]
fn max_pool_pads_overflow() {
    check_kernel_case(
        &pool_case("MaxPool"),
        &["node 'pool' (MaxPool)", "pads are too large"],
        30,
    );
}

#[test]
fn average_pool_pads_overflow() {
    check_kernel_case(
        &pool_case("AveragePool"),
        &["node 'pool' (AveragePool)", "pads are too large"],
        30,
    );
}

#[test]
fn lp_pool_pads_overflow() {
    check_kernel_case(
        &pool_case("LpPool"),
        &["node 'pool' (LpPool)", "pads are too large"],
        30,
    );
}

#[test]
fn max_pool_pads_larger_than_memory() {
    // Pads that fit in int64 but ask for 2^62 outputs: refused, not allocated.
    let pool = node("MaxPool", "pool", &["x"], &["y"])
        .msg(5, attr_ints("kernel_shape", &[1, 1]))
        .msg(5, attr_ints("pads", &[1 << 60, 0, 1 << 60, 0]));
    let bytes = constant_model(
        13,
        vec![pool],
        vec![floats("x", &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0])],
        &["y"],
    );
    // The engine's budget refuses it from the shape function, before the kernel runs.
    check_kernel_case(
        &bytes,
        &["node 'pool' (MaxPool)", "would exceed the memory budget"],
        30,
    );
}

#[test]
fn depth_to_space_blocksize_squared_wraps() {
    // 2^62 squared is 0 in 64-bit arithmetic: a division by zero waiting to happen.
    for op in ["DepthToSpace", "SpaceToDepth"] {
        let d2s = node(op, "blocks", &["x"], &["y"]).msg(5, attr_int("blocksize", 1 << 62));
        let bytes = constant_model(
            13,
            vec![d2s],
            vec![floats("x", &[1, 4, 1, 1], &[1.0, 2.0, 3.0, 4.0])],
            &["y"],
        );
        let what = format!("node 'blocks' ({op})");
        check_kernel_case(
            &bytes,
            &[&what, "blocksize 4611686018427387904 squared is too large"],
            30,
        );
    }
}

#[test]
fn concat_of_two_empty_initializers_with_2_to_the_40_rows() {
    let concat = node("Concat", "join", &["a", "b"], &["y"]).msg(5, attr_int("axis", 1));
    let bytes = constant_model(
        13,
        vec![concat],
        vec![
            floats("a", &[1 << 40, 0], &[]),
            floats("b", &[1 << 40, 0], &[]),
        ],
        &["y"],
    );
    check_kernel_case(&bytes, &["y float[1099511627776, 0] []"], 30);
}

#[test]
fn concat_dims_beyond_int64() {
    let concat = node("Concat", "join", &["a", "b", "c"], &["y"]).msg(5, attr_int("axis", 0));
    let shape = node("Shape", "shape", &["y"], &["s"]);
    let bytes = constant_model(
        13,
        vec![concat, shape],
        vec![
            floats("a", &[i64::MAX, 0], &[]),
            floats("b", &[i64::MAX, 0], &[]),
            floats("c", &[1, 0], &[]),
        ],
        &["s"],
    );
    check_kernel_case(
        &bytes,
        &[
            "node 'join' (Concat)",
            "the sizes along axis 0 add up past 2^63-1",
        ],
        30,
    );
}

#[test]
fn topk_k_0_on_2_to_the_36_empty_rows() {
    let topk = node("TopK", "top", &["x", "k"], &["values", "indices"]);
    let bytes = constant_model(
        13,
        vec![topk],
        vec![floats("x", &[1 << 36, 0], &[]), int64s("k", &[1], &[0])],
        &["values", "indices"],
    );
    check_kernel_case(
        &bytes,
        &[
            "values float[68719476736, 0] []",
            "indices int64[68719476736, 0] []",
        ],
        30,
    );
}

#[test]
fn einsum_of_eight_vectors_contracts_pairwise() {
    let names = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let einsum =
        node("Einsum", "sum", &names, &["y"]).msg(5, attr_string("equation", "a,b,c,d,e,f,g,h->"));
    let bytes = constant_model(
        13,
        vec![einsum],
        names.iter().map(|n| floats(n, &[64], &[1.0; 64])).collect(),
        &["y"],
    );
    // The sum of every product of one element from each: 64^8 = 2^48 (2.8147498e14 as f32
    // prints).
    check_kernel_case(&bytes, &["y float[] [281474980000000]"], 30);
}

#[test]
fn bool_initializer_constant() {
    // A control for the kernel cases: a plain constant model runs and prints its result.
    let not = node("Not", "not", &["x"], &["y"]);
    let bytes = constant_model(
        13,
        vec![not],
        vec![with_raw(tensor("x", BOOL, &[2]), &[1, 0])],
        &["y"],
    );
    check_kernel_case(&bytes, &["y bool[2] [false, true]"], 30);
}

// ---------------------------------------------------------------------------------------------
// Shape arithmetic: every product and sum of model-controlled sizes is checked. A tensor's dims
// must be at most 2^63-1 each, and its non-zero dims must multiply to at most 2^63-1: onnxruntime
// refuses `[2^62, 2, 0]` ("Integer overflow") and fails on `[0, 2^40, 2^30]` in every kernel that
// computes strides; here both are refused where the tensor is made, so no stride can overflow.

const FLOAT16: i64 = 10;

/// `ConstantOfShape(shape)` into `out`, with an optional one-element `value` attribute.
fn constant_of_shape(name: &str, shape: &str, out: &str, value: Option<Msg>) -> Msg {
    let n = node("ConstantOfShape", name, &[shape], &[out]);
    match value {
        Some(v) => n.msg(5, attr_tensor("value", v)),
        None => n,
    }
}

#[test]
fn transpose_of_an_empty_tensor_whose_other_dims_overflow() {
    // [0, 2^40, 2^30]: no element, but its strides overflow 64 bits (this panicked in Transpose,
    // DepthToSpace, SpaceToDepth, Flatten, the pools and the convolutions).
    let cases: [(&str, Vec<Msg>, &[i64]); 4] = [
        (
            "Transpose",
            vec![attr_ints("perm", &[2, 1, 0])],
            &[0, 1 << 40, 1 << 30],
        ),
        (
            "DepthToSpace",
            vec![attr_int("blocksize", 2)],
            &[0, 4, 1 << 40, 1 << 40],
        ),
        ("Flatten", vec![attr_int("axis", 1)], &[0, 1 << 40, 1 << 40]),
        (
            "MaxPool",
            vec![attr_ints("kernel_shape", &[2, 2])],
            &[0, 1, 1 << 40, 1 << 40],
        ),
    ];
    for (op, attrs, dims) in cases {
        let n = attrs
            .into_iter()
            .fold(node(op, "op", &["x"], &["y"]), |n, a| n.msg(5, a));
        let bytes = constant_model(13, vec![n], vec![floats("x", dims, &[])], &["y"]);
        check_kernel_case(&bytes, &["tensor 'x'", "is too large to address"], 30);
    }
}

/// `Transpose(ConstantOfShape(dims), perm=[2, 1, 0])`.
fn transposed_constant_of_shape(dims: [i64; 3]) -> Vec<u8> {
    let cos = constant_of_shape("cos", "s", "z", None);
    let t = node("Transpose", "t", &["z"], &["y"]).msg(5, attr_ints("perm", &[2, 1, 0]));
    constant_model(13, vec![cos, t], vec![int64s("s", &[3], &dims)], &["y"])
}

#[test]
fn constant_of_shape_with_leading_zero_and_dims_past_int64() {
    let bytes = transposed_constant_of_shape([0, 1 << 40, 1 << 36]);
    let expected = "output shape [0, 1099511627776, 68719476736] is too large";
    check_kernel_case(&bytes, &["node 'cos' (ConstantOfShape)", expected], 30);
}

#[test]
fn constant_of_shape_2_to_the_62_by_2_by_0() {
    // onnxruntime: "Integer overflow" (its running product of the dims passes 2^63-1).
    let bytes = constant_model(
        13,
        vec![constant_of_shape("cos", "s", "y", None)],
        vec![int64s("s", &[3], &[1 << 62, 2, 0])],
        &["y"],
    );
    check_kernel_case(
        &bytes,
        &["node 'cos' (ConstantOfShape)", "is too large"],
        30,
    );
}

#[test]
fn empty_tensor_whose_other_dims_multiply_to_2_to_the_62() {
    // The control: as large as an empty tensor may be, transposed without walking it.
    let bytes = transposed_constant_of_shape([1 << 31, 1 << 31, 0]);
    check_kernel_case(&bytes, &["y float[0, 2147483648, 2147483648] []"], 30);
}

/// `Shape(op(x, sizes))` for an empty float `x` of `x_dims` and an int64 `sizes` input.
fn shape_of_op_on_empty(op: &str, x_dims: &[i64], sizes: &[i64]) -> Vec<u8> {
    let n = node(op, "op", &["x", "sizes"], &["y"]);
    let shape = node("Shape", "shape", &["y"], &["s"]);
    let initializers = vec![
        floats("x", x_dims, &[]),
        int64s("sizes", &[sizes.len() as i64], sizes),
    ];
    constant_model(13, vec![n, shape], initializers, &["s"])
}

#[test]
fn pad_of_an_empty_tensor_to_a_dim_past_int64() {
    // The dim would be 2^63 + 3: `Shape` gave it back negative.
    let bytes = shape_of_op_on_empty("Pad", &[0, 2], &[0, i64::MAX, 0, 2]);
    let expected = "output shape [0, 9223372036854775811] is too large";
    check_kernel_case(&bytes, &["node 'op' (Pad)", expected], 30);
}

#[test]
fn tile_of_an_empty_tensor_to_a_dim_past_int64() {
    let bytes = shape_of_op_on_empty("Tile", &[0, 1 << 40], &[1, 1 << 23]);
    let expected = "output shape [0, 9223372036854775808] is too large";
    check_kernel_case(&bytes, &["node 'op' (Tile)", expected], 30);
}

#[test]
fn reverse_sequence_over_2_to_the_40_empty_blocks() {
    // Time axis 2^40, a batch of 0: the loop over (time, batch) blocks ran 2^40 times.
    let cos = constant_of_shape("cos", "s", "x", None);
    let rev = node("ReverseSequence", "rev", &["x", "lens"], &["y"])
        .msg(5, attr_int("time_axis", 0))
        .msg(5, attr_int("batch_axis", 1));
    let bytes = constant_model(
        13,
        vec![cos, rev],
        vec![
            int64s("s", &[3], &[1 << 40, 0, 1 << 20]),
            int64s("lens", &[0], &[]),
        ],
        &["y"],
    );
    check_kernel_case(&bytes, &["y float[1099511627776, 0, 1048576] []"], 30);
}

#[test]
fn pools_with_same_padding_and_a_kernel_of_2_to_the_124_taps() {
    // The taps inside the padding multiplied to 2^124 (the divisor of `count_include_pad`).
    for op in ["AveragePool", "LpPool", "MaxPool"] {
        let pool = node(op, "pool", &["x"], &["y"])
            .msg(5, attr_ints("kernel_shape", &[1 << 62, 1 << 62]))
            .msg(5, attr_string("auto_pad", "SAME_LOWER"))
            .msg(5, attr_int("count_include_pad", 1));
        let bytes = constant_model(
            19,
            vec![pool],
            vec![floats("x", &[1, 1, 2, 2], &[1.0, 2.0, 3.0, 4.0])],
            &["y"],
        );
        check_kernel_case(&bytes, &["y float[1, 1, 2, 2] ["], 30);
    }
}

#[test]
fn max_pool_of_an_empty_batch_with_2_to_the_20_pads() {
    // The windows of an empty output are not listed (they were asked for: 2^21 of them per
    // spatial dim, refused as too large).
    let pool = node("MaxPool", "pool", &["x"], &["y"])
        .msg(5, attr_ints("kernel_shape", &[1, 1]))
        .msg(5, attr_ints("pads", &[1 << 20; 4]));
    let bytes = constant_model(
        13,
        vec![pool],
        vec![floats("x", &[0, 1, 2, 2], &[])],
        &["y"],
    );
    check_kernel_case(&bytes, &["y float[0, 1, 2097154, 2097154] []"], 30);
}

#[test]
fn float16_convolutions_of_an_empty_batch_to_2_to_the_40_positions() {
    // Computed in f32 and rounded once: the planes of the empty output multiplied past 2^64
    // before the kernel saw the output was empty.
    let half = |name: &str, dims: &[i64], n: usize| {
        with_raw(tensor(name, FLOAT16, dims), &vec![0x3c; 2 * n])
    };
    for (op, attr) in [("Conv", "pads"), ("ConvTranspose", "strides")] {
        let size: &[i64] = if attr == "pads" {
            &[1 << 40; 4]
        } else {
            &[1 << 40; 2]
        };
        let conv = node(op, "conv", &["x", "w"], &["y"]).msg(5, attr_ints(attr, size));
        let initializers = vec![half("x", &[0, 1, 2, 2], 0), half("w", &[1, 1, 1, 1], 1)];
        let bytes = constant_model(13, vec![conv], initializers, &["y"]);
        let what = format!("node 'conv' ({op})");
        check_kernel_case(&bytes, &[&what, "is too large"], 30);
    }
}

#[test]
fn dilated_kernel_extent_wraps_to_2_to_the_64() {
    // 65535 x 281479271743489 = 2^64 - 1: one more and the extent wrapped to 0.
    let ones = Msg::new().int(1, 1).int(2, FLOAT).floats(4, &[1.0]);
    for (op, expected) in [
        ("ConvTranspose", "output is too large"),
        ("Conv", "dilated kernel is too large"),
        ("MaxPool", "dilated kernel is too large"),
    ] {
        let x = constant_of_shape("make_x", "xs", "x", Some(ones.clone()));
        let w = constant_of_shape("make_w", "ws", "w", Some(ones.clone()));
        let inputs: &[&str] = if op == "MaxPool" { &["x"] } else { &["x", "w"] };
        let mut op_node =
            node(op, "op", inputs, &["y"]).msg(5, attr_ints("dilations", &[281_479_271_743_489]));
        if op == "MaxPool" {
            op_node = op_node.msg(5, attr_ints("kernel_shape", &[65536]));
        }
        let bytes = constant_model(
            13,
            vec![x, w, op_node],
            vec![
                int64s("xs", &[3], &[1, 1, 1]),
                int64s("ws", &[3], &[1, 1, 65536]),
            ],
            &["y"],
        );
        let what = format!("node 'op' ({op})");
        check_kernel_case(&bytes, &[&what, expected], 30);
    }
}

#[test]
fn range_larger_than_the_address_space_limit() {
    // 2^30 floats (4 GiB) under a 4 GiB address-space limit: the elements were collected into
    // an `f64` vector, then copied twice, and the allocation aborted the process.
    let range = node("Range", "range", &["start", "limit", "delta"], &["y"]);
    let bytes = constant_model(
        13,
        vec![range],
        vec![
            floats("start", &[], &[0.0]),
            floats("limit", &[], &[(1u64 << 30) as f32]),
            floats("delta", &[], &[1.0]),
        ],
        &["y"],
    );
    // Out of memory here, or over the budget on a machine with less than 4 GiB.
    check_kernel_case(&bytes, &["node 'range' (Range)", "bytes"], 60);
}

#[test]
fn nonzero_of_2_to_the_28_true_values() {
    // The coordinates take 4 GiB: refused. They were gathered through an `f64` copy of the input
    // and a vector of positions (2 GiB each), and the allocation aborted the process.
    let yes = with_raw(tensor("value", BOOL, &[1]), &[1]);
    let cos = constant_of_shape("cos", "s", "x", Some(yes));
    let nz = node("NonZero", "nz", &["x"], &["y"]);
    let bytes = constant_model(
        13,
        vec![cos, nz],
        vec![int64s("s", &[2], &[1 << 14, 1 << 14])],
        &["y"],
    );
    check_kernel_case(&bytes, &["node 'nz' (NonZero)", "bytes"], 60);
}
