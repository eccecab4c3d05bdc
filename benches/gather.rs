//! The fast `GatherMultiaxis` kernel on the workloads of `/work/shared/bench/cases.py`.
//!
//! Each case is the ONNX operator expressed the way the rewrite expresses it: the
//! [`GatherPlan`] of `multigather::gather::map::onnx` applied to the operands, i.e. the one
//! `GatherMultiaxis` call a rewritten model makes (shape operations only relabel dimensions).
//! Every case runs on a one-thread pool and on a pool with every core, next to a `memcpy` of a
//! buffer the size of the output as the yardstick.
//!
//! `cargo bench --bench gather` runs everything with short measurement times (the machine is
//! shared); `cargo bench --bench gather -- gather_embed` filters as usual with criterion.
//!
//! The binary also has a timing mode for `scripts/bench_gather.py`, used for models whose
//! rewritten form `multigather run` cannot run yet:
//!
//! `gather-BENCH --time-case DIR --repeat N --threads T` loads `DIR/model.onnx` (one Gather,
//! GatherElements or GatherND node) and `DIR/test_data_set_0`, applies the node's plan `N` times
//! on a pool of `T` threads, checks the result against `output_0.pb` bit for bit, and prints
//! `{"runs","median_s","min_s","outputs"}` like `multigather run --json`.
//!
//! `gather-BENCH --simd-levels [--repeat N] [--only SHAPE]` times the element gathers at every SIMD level the
//! CPU has (forced through `FastOptions::simd`, serial), for 1-, 2-, 4- and 8-byte elements with
//! `int32` and `int64` indices, on four shapes: a last-axis Gather (`last_axis`), GatherElements along the last axis
//! (`elements_last`), GatherND points from a table in L2 (`points_l2`) and from a table far larger
//! than L2 (`points_mem`). It prints one line per shape, element size and index type with the
//! best thread CPU milliseconds of each level (levels interleaved), and of the default options
//! (the gathers at `SimdLevel::preferred`, the index pre-pass at `SimdLevel::detected`): the
//! figures behind `SimdLevel::preferred`.

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use multigather::gather::map::onnx;
use multigather::gather::{gather_multiaxis_with, FastOptions, GatherPlan, GatherSpec, SimdLevel};
use multigather::io::files::{read_inputs_dir, read_outputs_dir};
use multigather::tensor::Arena;
use multigather::{DataType, Tensor};
use rayon::ThreadPool;

/// The allocator of the `multigather` binary, so output allocations cost what they cost there.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The ONNX operator of a case and its attribute.
#[derive(Clone, Copy)]
enum Op {
    Gather { axis: i64 },
    GatherElements { axis: i64 },
    GatherNd { batch_dims: i64 },
}

impl Op {
    /// The plan the rewrite uses for operands of these ranks (`depth` is GatherND's index depth,
    /// the last indices dimension).
    fn plan(self, data_rank: usize, indices_rank: usize, depth: usize) -> GatherPlan {
        match self {
            Op::Gather { axis } => onnx::gather(data_rank, indices_rank, axis),
            Op::GatherElements { axis } => onnx::gather_elements(data_rank, axis),
            Op::GatherNd { batch_dims } => {
                onnx::gather_nd(data_rank, indices_rank, depth, batch_dims)
            }
        }
        .expect("the benchmark cases are valid ONNX")
    }
}

/// One workload of `cases.py`: index values are uniform in `[0, highs[k])` for the `k`-th entry
/// of the last indices dimension (cycling).
struct Case {
    name: &'static str,
    op: Op,
    dtype: DataType,
    data: &'static [usize],
    indices: &'static [usize],
    highs: &'static [i64],
}

const CASES: &[Case] = &[
    Case {
        name: "gather_embed",
        op: Op::Gather { axis: 0 },
        dtype: DataType::Float,
        data: &[30522, 768],
        indices: &[8, 512],
        highs: &[30522],
    },
    Case {
        name: "gather_mid_axis",
        op: Op::Gather { axis: 1 },
        dtype: DataType::Float,
        data: &[64, 1000, 16],
        indices: &[500],
        highs: &[1000],
    },
    Case {
        name: "gather_last_axis",
        op: Op::Gather { axis: 1 },
        dtype: DataType::Float,
        data: &[1024, 4096],
        indices: &[1024],
        highs: &[4096],
    },
    Case {
        name: "gather_elements_last",
        op: Op::GatherElements { axis: 1 },
        dtype: DataType::Float,
        data: &[4096, 1024],
        indices: &[4096, 256],
        highs: &[1024],
    },
    Case {
        name: "gather_elements_first",
        op: Op::GatherElements { axis: 0 },
        dtype: DataType::Float,
        data: &[1024, 4096],
        indices: &[512, 4096],
        highs: &[1024],
    },
    Case {
        name: "gathernd_rows",
        op: Op::GatherNd { batch_dims: 0 },
        dtype: DataType::Float,
        data: &[256, 256, 64],
        indices: &[100000, 2],
        highs: &[256, 256],
    },
    Case {
        name: "gathernd_points",
        op: Op::GatherNd { batch_dims: 0 },
        dtype: DataType::Float,
        data: &[512, 512],
        indices: &[1000000, 2],
        highs: &[512, 512],
    },
    Case {
        name: "gathernd_batch",
        op: Op::GatherNd { batch_dims: 1 },
        dtype: DataType::Float,
        data: &[32, 1024, 128],
        indices: &[32, 512, 1],
        highs: &[1024],
    },
    Case {
        name: "gather_embed_f16",
        op: Op::Gather { axis: 0 },
        dtype: DataType::Float16,
        data: &[30522, 768],
        indices: &[8, 512],
        highs: &[30522],
    },
    Case {
        name: "gather_elements_i8",
        op: Op::GatherElements { axis: 1 },
        dtype: DataType::Int8,
        data: &[4096, 1024],
        indices: &[4096, 256],
        highs: &[1024],
    },
];

/// SplitMix64: reproducible operand values without another dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The operands of a case: random element bits and uniform index values.
fn operands(case: &Case, rng: &mut Rng) -> (Tensor, Tensor) {
    let n: usize = case.data.iter().product();
    let bytes: Vec<u8> = (0..n * case.dtype.bits() / 8)
        .map(|_| rng.next() as u8)
        .collect();
    let data = Tensor::from_bytes(case.dtype, case.data, &bytes).expect("data tensor");
    let m: usize = case.indices.iter().product();
    let values: Vec<i64> = (0..m)
        .map(|i| (rng.next() % case.highs[i % case.highs.len()] as u64) as i64)
        .collect();
    let indices = Tensor::from_vec(DataType::Int64, case.indices, values).expect("indices");
    (data, indices)
}

/// The plan of `op` for these operands.
fn plan_for(op: Op, data: &Tensor, indices: &Tensor) -> GatherPlan {
    let depth = indices.shape().last().copied().unwrap_or(0);
    op.plan(data.rank(), indices.rank(), depth)
}

fn pool(threads: usize) -> ThreadPool {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool")
}

fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn bench_cases(c: &mut Criterion) {
    let mut rng = Rng(7);
    let pools: Vec<(usize, ThreadPool)> =
        [1, all_cores()].into_iter().map(|t| (t, pool(t))).collect();
    for case in CASES {
        let (data, indices) = operands(case, &mut rng);
        let plan = plan_for(case.op, &data, &indices);
        let out_bytes = plan
            .apply(&data, &indices)
            .expect("the case gathers")
            .as_bytes()
            .expect("fixed-width output")
            .len();
        let mut group = c.benchmark_group(case.name);
        group.throughput(Throughput::Bytes(out_bytes as u64));
        for (threads, pool) in &pools {
            group.bench_function(BenchmarkId::new("multiaxis", threads), |b| {
                b.iter(|| pool.install(|| plan.apply(black_box(&data), black_box(&indices))))
            });
        }
        let source = vec![1u8; out_bytes];
        let mut target = vec![0u8; out_bytes];
        group.bench_function("memcpy", |b| {
            b.iter(|| target.copy_from_slice(black_box(&source)))
        });
        group.finish();
    }
}

/// `--time-case DIR --repeat N --threads T`: see the module docs.
fn time_case(args: &[String]) -> Result<(), String> {
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .ok_or_else(|| format!("{flag} is required"))
    };
    let dir = Path::new(value("--time-case")?);
    let repeat: usize = value("--repeat")?
        .parse()
        .map_err(|e| format!("--repeat: {e}"))?;
    let threads: usize = value("--threads")?
        .parse()
        .map_err(|e| format!("--threads: {e}"))?;
    let model = multigather::io::load(dir.join("model.onnx")).map_err(|e| e.to_string())?;
    let node = model
        .graph
        .nodes()
        .map(|(_, n)| n)
        .next()
        .ok_or("the model has no node")?;
    let op = match node.op_type.as_str() {
        "Gather" => Op::Gather {
            axis: node.attr_int("axis", 0).map_err(|e| e.to_string())?,
        },
        "GatherElements" => Op::GatherElements {
            axis: node.attr_int("axis", 0).map_err(|e| e.to_string())?,
        },
        "GatherND" => Op::GatherNd {
            batch_dims: node.attr_int("batch_dims", 0).map_err(|e| e.to_string())?,
        },
        other => return Err(format!("{other} is not a gather")),
    };
    let set = dir.join("test_data_set_0");
    let inputs = read_inputs_dir(&model.graph, &set).map_err(|e| e.to_string())?;
    let [(_, data), (_, indices)] = &inputs[..] else {
        return Err("expected two inputs, data and indices".into());
    };
    let expected = read_outputs_dir(&set).map_err(|e| e.to_string())?;
    let plan = plan_for(op, data, indices);
    let pool = pool(threads);
    let mut times = Vec::with_capacity(repeat);
    let mut out = None;
    for _ in 0..repeat.max(1) {
        let start = Instant::now();
        let result = pool.install(|| plan.apply(data, indices));
        times.push(start.elapsed());
        out = Some(result.map_err(|e| e.to_string())?);
    }
    let out = out.ok_or("no run")?;
    if expected.first() != Some(&out) {
        return Err("the output differs from output_0.pb".into());
    }
    times.sort();
    let secs = |d: Duration| d.as_secs_f64();
    println!(
        "{{\"runs\":{},\"median_s\":{},\"min_s\":{},\"outputs\":[{{\"name\":\"{}\",\"dtype\":\"{}\",\"shape\":{:?}}}]}}",
        times.len(),
        secs(times[times.len() / 2]),
        secs(times[0]),
        node.outputs.first().map_or("", |s| s.as_str()),
        out.dtype(),
        out.shape(),
    );
    Ok(())
}

/// `--simd-levels [--repeat N] [--only SHAPE]`: see the module docs.
fn simd_levels(args: &[String]) -> Result<(), String> {
    let repeat: usize = match args.iter().position(|a| a == "--repeat") {
        Some(i) => args
            .get(i + 1)
            .ok_or("--repeat needs a value")?
            .parse()
            .map_err(|e| format!("--repeat: {e}"))?,
        None => 15,
    };
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1));
    let levels: Vec<SimdLevel> = [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512]
        .into_iter()
        .filter(|&l| l <= SimdLevel::detected())
        .collect();
    // (name, input shape, logical indices shape with tuples folded, axes, index highs)
    type Shape = (
        &'static str,
        &'static [usize],
        &'static [usize],
        &'static [usize],
        &'static [u64],
    );
    let shapes: [Shape; 4] = [
        ("last_axis", &[1024, 4096], &[1, 1024], &[1], &[4096]),
        ("elements_last", &[4096, 1024], &[4096, 256], &[1], &[1024]),
        (
            "points_l2",
            &[256, 256],
            &[1 << 20, 2],
            &[0, 1],
            &[256, 256],
        ),
        (
            "points_mem",
            &[4096, 4096],
            &[1 << 20, 2],
            &[0, 1],
            &[4096, 4096],
        ),
    ];
    let dtypes = [
        DataType::Uint8,
        DataType::Float16,
        DataType::Float,
        DataType::Double,
    ];
    // Each level forced on both the gathers and the index pre-pass, then the defaults (the
    // preferred gather level with the detected pre-pass level), which no forced level shows
    // where the two differ.
    let choices: Vec<Option<SimdLevel>> = levels.iter().copied().map(Some).chain([None]).collect();
    println!("shape, element bytes, indices, {}", {
        let names: Vec<String> = choices
            .iter()
            .map(|l| match l {
                Some(l) => format!("{l:?} ms"),
                None => "default ms".to_string(),
            })
            .collect();
        names.join(", ")
    });
    let mut rng = Rng(11);
    for (name, input_shape, indices_shape, axes, highs) in shapes {
        if only.is_some_and(|o| o != name) {
            continue;
        }
        for dtype in dtypes {
            let n: usize = input_shape.iter().product();
            let bytes: Vec<u8> = (0..n * dtype.bits() / 8)
                .map(|_| rng.next() as u8)
                .collect();
            let input =
                Tensor::from_bytes(dtype, input_shape, &bytes).map_err(|e| e.to_string())?;
            let m: usize = indices_shape.iter().product();
            let values: Vec<i64> = (0..m)
                .map(|i| (rng.next() % highs[i % highs.len()]) as i64)
                .collect();
            let spec = GatherSpec::new(axes.to_vec());
            for int32 in [true, false] {
                let indices = if int32 {
                    let v: Vec<i32> = values.iter().map(|&x| x as i32).collect();
                    Tensor::from_vec(DataType::Int32, indices_shape, v)
                } else {
                    Tensor::from_vec(DataType::Int64, indices_shape, values.clone())
                }
                .map_err(|e| e.to_string())?;
                // Levels interleaved run by run, so load from other processes hits them alike;
                // the best thread CPU time of each, on outputs reused through a pooled arena.
                let mut best = vec![f64::INFINITY; choices.len()];
                let mut first: Option<Tensor> = None;
                let arena = Arena::new(usize::MAX, true);
                for _ in 0..repeat.max(1) + 1 {
                    for (k, &level) in choices.iter().enumerate() {
                        let options = match level {
                            Some(level) => FastOptions::serial().with_simd(level),
                            None => FastOptions::serial(),
                        };
                        let start = thread_cpu_seconds();
                        let out = arena
                            .enter(|| gather_multiaxis_with(&input, &indices, &spec, &options))
                            .map_err(|e| e.to_string())?;
                        best[k] = best[k].min(thread_cpu_seconds() - start);
                        match &first {
                            Some(f) if *f != out => return Err(format!("{level:?} differs")),
                            Some(_) => {}
                            None => first = Some(out),
                        }
                    }
                }
                let cells: Vec<String> = best.iter().map(|s| format!("{:.3}", s * 1e3)).collect();
                let index = if int32 { "int32" } else { "int64" };
                let width = dtype.bits() / 8;
                println!("{name}, {width}, {index}, {}", cells.join(", "));
            }
        }
    }
    Ok(())
}

/// CPU time of the calling thread, in seconds (time the thread was descheduled is not counted).
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--simd-levels") {
        if let Err(e) = simd_levels(&args) {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
        return;
    }
    if args.iter().any(|a| a == "--time-case") {
        if let Err(e) = time_case(&args) {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
        return;
    }
    let mut c = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .configure_from_args();
    bench_cases(&mut c);
    c.final_summary();
}
