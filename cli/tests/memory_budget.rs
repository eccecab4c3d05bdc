//! The memory budget: a model that asks for more memory than the budget allows fails with a
//! one-line error naming the node and the size, quickly, before anything is allocated — in the
//! library, in `run` and in `verify`, under an address-space limit — and a model that fits
//! reuses its buffers from run to run.

use std::process::Command;
use std::time::{Duration, Instant};

use multigather::interp::{RunOptions, Session};
use multigather::ir::{AttrValue, Dim, Graph, Model, Node, StoredTensor, Type, ValueInfo};
use multigather::{DataType, Tensor};

/// `Gather(data: float[1, n], indices: int64[n], axis=0)`: an output of `4 n²` bytes, 4 TB for
/// `n = 10⁶`. With `constant`, both operands are initializers (planning sees them all).
fn huge_gather(n: usize, constant: bool) -> Model {
    let mut g = Graph::new("g");
    let n64 = n as i64;
    if constant {
        g.initializers.push(StoredTensor::raw(
            Some("data"),
            DataType::Float,
            &[1, n64],
            vec![0u8; 4 * n].into(),
        ));
        g.initializers
            .push(StoredTensor::from_i64s(Some("idx"), &[n64], &vec![0; n]));
    } else {
        let dims = vec![Dim::Known(1), Dim::Known(n64)];
        g.inputs
            .push(ValueInfo::new("data", Type::tensor(DataType::Float, dims)));
        g.inputs.push(ValueInfo::new(
            "idx",
            Type::tensor(DataType::Int64, vec![Dim::Known(n64)]),
        ));
    }
    g.outputs.push(ValueInfo::untyped("y"));
    g.add_node(
        Node::new("Gather", "huge", ["data", "idx"], ["y"]).with_attr("axis", AttrValue::Int(0)),
    );
    Model::new(g, 13)
}

#[test]
fn a_four_terabyte_gather_is_refused_before_it_runs() {
    let model = huge_gather(1_000_000, false);
    let data = Tensor::zeros(DataType::Float, &[1, 1_000_000]).unwrap();
    let idx = Tensor::zeros(DataType::Int64, &[1_000_000]).unwrap();
    let session = Session::with_options(
        &model,
        RunOptions {
            threads: Some(1),
            max_memory: Some(1 << 30),
            ..RunOptions::default()
        },
    );
    let start = Instant::now();
    let err = session
        .run(vec![("data".into(), data), ("idx".into(), idx)])
        .unwrap_err()
        .to_string();
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(err.contains("'huge' (Gather)"), "{err}");
    assert!(err.contains("3.6 TiB (4000000000000 bytes)"), "{err}");
    assert!(err.contains("memory budget of 1.0 GiB"), "{err}");
}

#[test]
fn a_small_budget_refuses_what_a_larger_one_allows() {
    let model = huge_gather(1000, true);
    let run = |max_memory| {
        Session::with_options(
            &model,
            RunOptions {
                threads: Some(1),
                max_memory: Some(max_memory),
                ..RunOptions::default()
            },
        )
        .run(Vec::new())
    };
    let err = run(1 << 20).unwrap_err().to_string();
    assert!(
        err.contains("'huge' (Gather)") && err.contains("4000000 bytes"),
        "{err}"
    );
    let out = run(64 << 20).unwrap();
    assert_eq!(out[0].1.shape(), &[1000, 1000]);
}

#[test]
fn buffers_are_kept_between_runs_of_a_session() {
    let model = huge_gather(512, false);
    let inputs = || {
        vec![
            (
                "data".to_string(),
                Tensor::zeros(DataType::Float, &[1, 512]).unwrap(),
            ),
            (
                "idx".to_string(),
                Tensor::zeros(DataType::Int64, &[512]).unwrap(),
            ),
        ]
    };
    let session = Session::new(&model);
    let first = session.run(inputs()).unwrap();
    drop(first);
    let pooled = session.arena().pooled_bytes();
    assert!(pooled >= 512 * 512 * 4, "{pooled}");
    let second = session.run(inputs()).unwrap();
    // The output of the second run took the pooled buffer instead of a new one.
    assert!(session.arena().pooled_bytes() < pooled);
    assert_eq!(
        second[0].1,
        Tensor::zeros(DataType::Float, &[512, 512]).unwrap()
    );
}

/// `x -> Exp -> Add(b) -> Relu -> Sigmoid -> Mul(b) -> HardSwish -> y` on a float[n], with
/// `b` a float[1] initializer; with `keep`, every intermediate value is a graph output too, so
/// none dies at the step that reads it.
fn activation_chain(n: usize, keep: bool) -> Model {
    let mut g = Graph::new("chain");
    g.inputs.push(ValueInfo::new(
        "x",
        Type::tensor(DataType::Float, vec![Dim::Known(n as i64)]),
    ));
    g.initializers.push(StoredTensor::raw(
        Some("b"),
        DataType::Float,
        &[1],
        0.75f32.to_le_bytes().to_vec().into(),
    ));
    let ops = ["Exp", "Add", "Relu", "Sigmoid", "Mul", "HardSwish"];
    for (k, op) in ops.iter().enumerate() {
        let input = if k == 0 {
            "x".to_string()
        } else {
            format!("v{k}")
        };
        let output = if k + 1 == ops.len() {
            "y".to_string()
        } else {
            format!("v{}", k + 1)
        };
        if keep && k + 1 < ops.len() {
            g.outputs.push(ValueInfo::untyped(&output));
        }
        let inputs = match *op {
            "Add" | "Mul" => vec![input, "b".to_string()],
            _ => vec![input],
        };
        g.add_node(Node::new(op, &format!("n{k}"), inputs, [output]));
    }
    g.outputs.push(ValueInfo::untyped("y"));
    Model::new(g, 14)
}

#[test]
fn activations_on_dying_values_rewrite_their_input_in_place() {
    let n = 1 << 18;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 - 1e5) * 1e-4).collect();
    let input = || {
        vec![(
            "x".to_string(),
            Tensor::from_vec(DataType::Float, &[n], x.clone()).unwrap(),
        )]
    };
    let chain = activation_chain(n, false);
    // Unfused: planning would run the `Exp -> Add` pair as one chain step (a fresh output).
    let unfused = RunOptions {
        unfused: true,
        ..RunOptions::default()
    };
    let session = Session::with_options(&chain, unfused);
    let in_place = session.run(input()).unwrap();
    // The input was handed over whole and every step wrote over it: no buffer was freed.
    assert_eq!(session.arena().pooled_bytes(), 0);
    let kept = activation_chain(n, true);
    let out_of_place = Session::new(&kept).run(input()).unwrap();
    let y = |outputs: &[(String, Tensor)]| {
        outputs
            .iter()
            .find(|(name, _)| name == "y")
            .unwrap()
            .1
            .to_vec::<f32>()
            .unwrap()
    };
    let (a, b) = (y(&in_place), y(&out_of_place));
    assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()));
    // A value another holder shares is not written over: the caller's tensor stays as given.
    let shared = Tensor::from_vec(DataType::Float, &[n], x.clone()).unwrap();
    let again = Session::new(&chain)
        .run(vec![("x".to_string(), shared.clone())])
        .unwrap();
    assert_eq!(shared.to_vec::<f32>().unwrap(), x);
    assert_eq!(y(&again), a);
}

/// Runs the binary under a 16 GiB address-space limit and returns (exit code, stderr, seconds).
fn run_limited(args: &[&str]) -> (Option<i32>, String, f64) {
    let bin = env!("CARGO_BIN_EXE_multigather");
    let script = "ulimit -v 16777216; exec \"$0\" \"$@\"";
    let start = Instant::now();
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(bin)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        start.elapsed().as_secs_f64(),
    )
}

#[test]
fn run_and_verify_of_a_four_terabyte_output_exit_2_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    for (name, constant) in [("inputs.onnx", false), ("constants.onnx", true)] {
        let path = dir.path().join(name);
        multigather::io::save(&huge_gather(1_000_000, constant), &path).unwrap();
        let path = path.to_str().unwrap();
        let mut cases = vec![vec!["verify", path, "--random"]];
        if constant {
            cases.push(vec!["run", path]);
        }
        for args in cases {
            let (code, stderr, seconds) = run_limited(&args);
            assert_eq!(code, Some(2), "{args:?}: {stderr}");
            assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
            assert!(stderr.contains("'huge' (Gather)"), "{stderr}");
            assert!(stderr.contains("4000000000000 bytes"), "{stderr}");
            assert!(seconds < 1.0, "{args:?} took {seconds} s");
        }
    }
}

#[test]
fn max_memory_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    multigather::io::save(&huge_gather(1000, true), &path).unwrap();
    let path = path.to_str().unwrap();
    let (code, stderr, _) = run_limited(&["run", path, "--max-memory", "1M"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("memory budget of 1.0 MiB"), "{stderr}");
    let (code, stderr, _) = run_limited(&["run", path, "--max-memory", "64M"]);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr, _) = run_limited(&["run", path, "--max-memory", "lots"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("'lots' is not a size"), "{stderr}");
}

#[test]
fn verify_random_on_a_declared_float_2_to_the_36_input() {
    let mut g = Graph::new("g");
    let dims = vec![Dim::Known(1 << 36)];
    g.inputs
        .push(ValueInfo::new("x", Type::tensor(DataType::Float, dims)));
    g.outputs.push(ValueInfo::untyped("y"));
    g.add_node(Node::new("Relu", "r", ["x"], ["y"]));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big_input.onnx");
    multigather::io::save(&Model::new(g, 13), &path).unwrap();
    let (code, stderr, seconds) = run_limited(&["verify", path.to_str().unwrap(), "--random"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("drawing random inputs"), "{stderr}");
    assert!(stderr.contains("274877906944 bytes"), "{stderr}");
    assert!(seconds < 1.0, "took {seconds} s");
}
