//! Rewrite cost: a generated model with N gather nodes, timed through load, rewrite and save, for
//! N = 10k, 30k and 100k (time should grow linearly with N).
//!
//! Then a model with 1 GiB of external weights: loading, rewriting and saving it next to the
//! weights must not read them, so its times stay those of a small model.
//!
//! Then two scale cases that were once quadratic: loading a model with N unused model-local
//! functions (N = 20k and 100k; the checks rebuilt the set of functions for every one), and
//! lowering a rewritten chain of N gathers, a star of N gathers reading one value and N gathers
//! each in an `If` branch (N = 10k to 80k). All must grow linearly.
//!
//! Run with `cargo bench --bench rewrite`, or `cargo bench --bench rewrite -- functions lowering`
//! for some sections only (`chain`, `external`, `functions`, `lowering`). Prints one line per
//! case with the median of a few runs.

use std::time::{Duration, Instant};

use multigather::ir::{AttrValue, Dim, Graph, Model, Node, StoredTensor, Type, ValueInfo};
use multigather::pass::{GatherToMultiaxis, LowerMultiaxis, RewriteConfig};
use multigather::DataType;

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A chain of `n` gathers, cycling through the three kinds, over a [4, 3] float tensor.
fn chain(n: usize) -> Model {
    let mut g = Graph::new("chain");
    let dims = vec![Dim::Known(4), Dim::Known(3)];
    g.inputs.push(ValueInfo::new(
        "x0",
        Type::tensor(DataType::Float, dims.clone()),
    ));
    g.initializers
        .push(StoredTensor::from_i64s(Some("rows"), &[4], &[3, 1, 0, 2]));
    g.initializers.push(StoredTensor::from_i64s(
        Some("elements"),
        &[4, 3],
        &[0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 0, 0],
    ));
    g.initializers.push(StoredTensor::from_i64s(
        Some("points"),
        &[4, 1],
        &[1, 0, 3, 2],
    ));
    for i in 0..n {
        let (op, idx) = match i % 3 {
            0 => ("Gather", "rows"),
            1 => ("GatherElements", "elements"),
            _ => ("GatherND", "points"),
        };
        let (x, y) = (format!("x{i}"), format!("x{}", i + 1));
        g.value_info.push(ValueInfo::new(
            &y,
            Type::tensor(DataType::Float, dims.clone()),
        ));
        g.add_node(Node::new(
            op,
            &format!("node{i}"),
            [x.as_str(), idx],
            [y.as_str()],
        ));
    }
    g.outputs.push(ValueInfo::new(
        format!("x{n}"),
        Type::tensor(DataType::Float, dims),
    ));
    Model::new(g, 13)
}

/// The median of three runs of `f`, each returning the time it measured.
fn median_of_3(mut f: impl FnMut() -> Duration) -> Duration {
    median((0..3).map(|_| f()).collect())
}

/// Microseconds per item.
fn per_item_us(t: Duration, n: usize) -> f64 {
    t.as_secs_f64() * 1e6 / n as f64
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |section: &str| only.is_empty() || only.iter().any(|o| o == section);
    if wanted("chain") {
        chains();
    }
    if wanted("external") {
        external_weights();
    }
    if wanted("functions") {
        functions();
    }
    if wanted("lowering") {
        lowering();
    }
}

/// Load, rewrite and save of a chain of N gathers.
fn chains() {
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>12}",
        "nodes", "load", "rewrite", "save", "rewrite/node"
    );
    for n in [10_000, 30_000, 100_000] {
        let bytes = multigather::io::to_bytes(&chain(n)).expect("encode");
        let (mut load, mut rewrite, mut save) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..3 {
            let t = Instant::now();
            let mut model = multigather::io::load_bytes(&bytes).expect("load");
            load.push(t.elapsed());
            let t = Instant::now();
            let report =
                GatherToMultiaxis::rewrite(&mut model, RewriteConfig::default()).expect("rewrite");
            rewrite.push(t.elapsed());
            assert_eq!(report.rewritten, n);
            let t = Instant::now();
            let out = multigather::io::to_bytes(&model).expect("save");
            save.push(t.elapsed());
            assert!(!out.is_empty());
        }
        let r = median(rewrite.clone());
        println!(
            "{n:>8} {:>10.1?} {:>10.1?} {:>10.1?} {:>10.2}us",
            median(load),
            r,
            median(save),
            r.as_secs_f64() * 1e6 / n as f64
        );
    }
}

/// A model whose main graph is one `Relu`, with `n` unused model-local functions of one node each.
fn with_functions(n: usize) -> Model {
    use multigather::ir::Function;
    let mut g = Graph::new("main");
    g.inputs.push(ValueInfo::untyped("x"));
    g.outputs.push(ValueInfo::untyped("y"));
    g.add_node(Node::new("Relu", "relu", ["x"], ["y"]));
    let mut model = Model::new(g, 13);
    model.opset_imports.push(multigather::ir::OpsetImport {
        domain: Some("local".into()),
        version: 1,
    });
    for i in 0..n {
        let mut body = Graph::new(format!("f{i}"));
        body.inputs.push(ValueInfo::untyped("a"));
        body.outputs.push(ValueInfo::untyped("b"));
        body.add_node(Node::new("Neg", "neg", ["a"], ["b"]));
        model.functions.push(Function {
            name: format!("f{i}"),
            domain: "local".into(),
            overload: None,
            attributes: Vec::new(),
            attribute_defaults: Vec::new(),
            opset_imports: vec![multigather::ir::OpsetImport {
                domain: Some(String::new()),
                version: 13,
            }],
            body,
            doc_string: None,
            metadata_props: Vec::new(),
        });
    }
    model
}

/// Loading N unused model-local functions (which the loader checks, one by one).
fn functions() {
    println!("{:>10} {:>10} {:>12}", "functions", "load", "load/function");
    for n in [20_000, 100_000] {
        let bytes = multigather::io::to_bytes(&with_functions(n)).expect("encode");
        let t = median_of_3(|| {
            let t = Instant::now();
            let model = multigather::io::load_bytes(&bytes).expect("load");
            let elapsed = t.elapsed();
            assert_eq!(model.functions.len(), n);
            elapsed
        });
        println!("{n:>10} {t:>10.1?} {:>10.2}us", per_item_us(t, n));
    }
}

/// N gathers side by side, every one reading the same value, which one node produces: the
/// shape that made removing nodes quadratic while the graph stored its edges in lists.
fn star(n: usize) -> Model {
    let mut g = Graph::new("star");
    let dims = vec![Dim::Known(4), Dim::Known(3)];
    g.inputs.push(ValueInfo::new(
        "x",
        Type::tensor(DataType::Float, dims.clone()),
    ));
    g.initializers
        .push(StoredTensor::from_i64s(Some("rows"), &[2], &[3, 1]));
    g.add_node(Node::new("Relu", "shared", ["x"], ["shared"]));
    let picked: Vec<String> = (0..n).map(|k| format!("y{k}")).collect();
    for (k, out) in picked.iter().enumerate() {
        g.add_node(Node::new(
            "Gather",
            &format!("g{k}"),
            ["shared", "rows"],
            [out.as_str()],
        ));
    }
    g.add_node(Node::new("Concat", "all", picked, ["y"]).with_attr("axis", AttrValue::Int(0)));
    g.outputs.push(ValueInfo::untyped("y"));
    Model::new(g, 13)
}

/// A chain of N `If` nodes, each gathering in one branch: the shape that made typing
/// quadratic while every subgraph's environment copied its enclosing scope's.
fn branches(n: usize) -> Model {
    let mut g = Graph::new("branches");
    let dims = vec![Dim::Known(4), Dim::Known(3)];
    let ty = Type::tensor(DataType::Float, dims);
    g.inputs.push(ValueInfo::new("x0", ty.clone()));
    g.inputs
        .push(ValueInfo::new("c", Type::tensor(DataType::Bool, vec![])));
    g.initializers
        .push(StoredTensor::from_i64s(Some("rows"), &[4], &[3, 1, 0, 2]));
    for k in 0..n {
        let (x, y) = (format!("x{k}"), format!("x{}", k + 1));
        let branch = |name: &str, node: Node, out: &str| {
            let mut b = Graph::new(name);
            b.add_node(node);
            b.outputs.push(ValueInfo::new(out, ty.clone()));
            AttrValue::Graph(Box::new(b))
        };
        let (t, e) = (format!("t{k}"), format!("e{k}"));
        let then = branch(
            "then",
            Node::new(
                "Gather",
                &format!("g{k}"),
                [x.as_str(), "rows"],
                [t.as_str()],
            ),
            &t,
        );
        let other = branch(
            "else",
            Node::new("Identity", &format!("i{k}"), [x.as_str()], [e.as_str()]),
            &e,
        );
        g.add_node(
            Node::new("If", &format!("if{k}"), ["c"], [y.as_str()])
                .with_attr("then_branch", then)
                .with_attr("else_branch", other),
        );
    }
    g.outputs.push(ValueInfo::new(format!("x{n}"), ty));
    Model::new(g, 13)
}

/// Lowering a rewritten chain of N gathers, a star of N gathers reading one value (see
/// [`star`]) and N gathers in `If` branches (see [`branches`]) back to standard ONNX.
fn lowering() {
    println!("{:>8} {:>10} {:>12}", "gathers", "lower", "lower/node");
    let shapes = [
        ("chain", chain as fn(usize) -> Model),
        ("star", star),
        ("branches", branches),
    ];
    for (shape, make) in shapes {
        println!("{shape}:");
        lower_cases(make);
    }
}

fn lower_cases(make: fn(usize) -> Model) {
    for n in [10_000, 20_000, 40_000, 80_000] {
        let mut rewritten = make(n);
        GatherToMultiaxis::rewrite(&mut rewritten, RewriteConfig::default()).expect("rewrite");
        let t = median_of_3(|| {
            let mut model = rewritten.clone();
            let t = Instant::now();
            let report = LowerMultiaxis::lower(&mut model).expect("lower");
            let elapsed = t.elapsed();
            assert_eq!(report.skipped, 0);
            elapsed
        });
        println!("{n:>8} {t:>10.1?} {:>10.2}us", per_item_us(t, n));
    }
}

/// An embedding table of 1 GiB in an external file, looked up by one Gather.
fn external_weights() {
    use bytes::Bytes;
    use multigather::io::{ExternalPolicy, SaveOptions};

    const ROWS: i64 = 1 << 18; // x 1024 floats = 1 GiB
    let dir = tempfile::tempdir().expect("temp dir");
    let mut g = Graph::new("embed");
    g.inputs.push(ValueInfo::new(
        "ids",
        Type::tensor(DataType::Int64, vec![Dim::Known(8)]),
    ));
    g.outputs.push(ValueInfo::untyped("rows"));
    let table = Bytes::from(vec![0u8; (ROWS * 1024 * 4) as usize]);
    g.initializers.push(StoredTensor::raw(
        Some("table"),
        DataType::Float,
        &[ROWS, 1024],
        table,
    ));
    g.add_node(Node::new("Gather", "lookup", ["table", "ids"], ["rows"]));
    let path = dir.path().join("model.onnx");
    let options = SaveOptions {
        external: ExternalPolicy::File {
            file: "weights.bin".into(),
            threshold: 1024,
        },
    };
    multigather::io::save_with(&Model::new(g, 13), &path, &options).expect("save");

    let (mut load, mut rewrite, mut save) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        let t = Instant::now();
        let mut model = multigather::io::load(&path).expect("load");
        load.push(t.elapsed());
        let t = Instant::now();
        GatherToMultiaxis::rewrite(&mut model, RewriteConfig::default()).expect("rewrite");
        rewrite.push(t.elapsed());
        let t = Instant::now();
        multigather::io::save(&model, dir.path().join("rewritten.onnx")).expect("save");
        save.push(t.elapsed());
    }
    println!(
        "1 GiB external weights: load {:.1?}, rewrite {:.1?}, save {:.1?}",
        median(load),
        median(rewrite),
        median(save)
    );
}
