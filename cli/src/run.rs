//! `multigather run`: runs a model with the reference interpreter, optionally many times for
//! timing, and writes or summarises its outputs.

use std::time::Instant;

use anyhow::{Context, Result};
use multigather::interp::{Profile, Session};
use multigather::io::files::{read_input_values, read_tensor, write_value_pb};
use multigather::ir::{Model, SequenceOfMaps, Value};
use multigather::Tensor;
use serde::Serialize;

use super::options::{Inputs, Run};
use super::{output, Outcome};

#[derive(Serialize)]
struct Timing {
    runs: usize,
    median_s: f64,
    min_s: f64,
    /// Every run's time, in the order of the runs (the first one plans the graph and fills
    /// the buffer pool).
    times_s: Vec<f64>,
    outputs: Vec<OutputSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<ProfileSummary>,
}

/// Where the time of `run --profile` went, per run.
#[derive(Serialize)]
struct ProfileSummary {
    /// Per operator, slowest first.
    ops: Vec<OpTime>,
    /// Per node, slowest first.
    nodes: Vec<NodeTime>,
    /// Values computed once at planning (not per run): how many, and their bytes.
    folded_values: usize,
    folded_bytes: usize,
}

#[derive(Serialize)]
struct OpTime {
    op_type: String,
    nodes: usize,
    ms_per_run: f64,
    share: f64,
}

#[derive(Serialize)]
struct NodeTime {
    node: String,
    op_type: String,
    ms_per_run: f64,
    share: f64,
}

impl ProfileSummary {
    fn of(profile: &Profile) -> ProfileSummary {
        let runs = profile.runs.max(1) as f64;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3 / runs;
        let total: f64 = profile.steps.iter().map(|s| ms(s.total)).sum();
        let share = |t: f64| if total > 0.0 { t / total } else { 0.0 };
        let mut ops: Vec<OpTime> = Vec::new();
        for step in &profile.steps {
            let t = ms(step.total);
            match ops.iter_mut().find(|o| o.op_type == step.op_type) {
                Some(op) => {
                    op.nodes += 1;
                    op.ms_per_run += t;
                }
                None => ops.push(OpTime {
                    op_type: step.op_type.clone(),
                    nodes: 1,
                    ms_per_run: t,
                    share: 0.0,
                }),
            }
        }
        for op in &mut ops {
            op.share = share(op.ms_per_run);
        }
        ops.sort_by(|a, b| b.ms_per_run.total_cmp(&a.ms_per_run));
        let mut nodes: Vec<NodeTime> = profile
            .steps
            .iter()
            .enumerate()
            .map(|(k, step)| NodeTime {
                node: if step.node.is_empty() {
                    format!("#{k}")
                } else {
                    step.node.clone()
                },
                op_type: step.op_type.clone(),
                ms_per_run: ms(step.total),
                share: share(ms(step.total)),
            })
            .collect();
        nodes.sort_by(|a, b| b.ms_per_run.total_cmp(&a.ms_per_run));
        ProfileSummary {
            ops,
            nodes,
            folded_values: profile.folded.0,
            folded_bytes: profile.folded.1,
        }
    }

    /// The table printed on stderr: every operator, then the ten slowest nodes.
    fn text(&self, runs: usize) -> String {
        const SLOWEST: usize = 10;
        let total: f64 = self.ops.iter().map(|o| o.ms_per_run).sum();
        let mut text = format!(
            "profile: {total:.3} ms per run in {} steps, over {}\n",
            self.nodes.len(),
            match runs {
                1 => "1 run".to_owned(),
                _ => format!("runs 2 to {runs} (the first plans and warms up)"),
            }
        );
        text += &format!(
            "  folded at planning: {} value(s), {}\n",
            self.folded_values,
            multigather::tensor::human_bytes(self.folded_bytes)
        );
        text += &format!(
            "  {:<32} {:>12} {:>7} {:>6}\n",
            "operator", "ms/run", "share", "nodes"
        );
        for op in &self.ops {
            text += &format!(
                "  {:<32} {:>12.3} {:>6.1}% {:>6}\n",
                output::printable(&op.op_type),
                op.ms_per_run,
                op.share * 100.0,
                op.nodes
            );
        }
        text += "  slowest nodes:\n";
        for node in self.nodes.iter().take(SLOWEST) {
            text += &format!(
                "  {:<32} {:>12.3} {:>6.1}%  {}\n",
                output::printable(&node.op_type),
                node.ms_per_run,
                node.share * 100.0,
                output::printable(&node.node)
            );
        }
        text.pop();
        text
    }
}

#[derive(Serialize)]
struct OutputSummary {
    name: String,
    dtype: String,
    shape: Vec<usize>,
}

/// Reads the inputs of `--inputs DIR` and `--input NAME=FILE` (the latter override the former):
/// tensors, and in a directory the sequences and optionals of the inputs declared so.
pub fn read_inputs(model: &Model, given: &Inputs) -> Result<Vec<(String, Value)>> {
    let mut inputs = match &given.dir {
        Some(dir) => read_input_values(&model.graph, dir)
            .with_context(|| format!("reading inputs from {}", dir.display()))?,
        None => Vec::new(),
    };
    for (name, file) in &given.files {
        let (_, tensor) = read_tensor(file)?;
        inputs.retain(|(n, _)| n != name);
        inputs.push((name.clone(), Value::Tensor(tensor)));
    }
    Ok(inputs)
}

/// Runs the model `options.repeat` times; writes or prints its outputs and timings.
pub fn run(options: Run) -> Result<Outcome> {
    let repeat = options.repeat.get();
    let model = super::load(&options.model)?;
    let inputs = read_inputs(&model, &options.inputs)?;
    let profiled = options.run.profile;
    let session = Session::with_options(&model, options.run);
    let context = || format!("running {}", options.model.display());
    session.check().with_context(context)?;
    let mut times = Vec::with_capacity(repeat);
    let mut outputs = Vec::new();
    for run in 0..repeat {
        // The last run's outputs go back to the session's pool before the next run, as they do
        // for a caller that consumes each run's outputs: the next run then writes warm buffers.
        drop(std::mem::take(&mut outputs));
        let start = Instant::now();
        outputs = session.run_values(inputs.clone()).with_context(context)?;
        times.push(start.elapsed().as_secs_f64());
        if run == 0 && repeat > 1 {
            // The first run plans the graph and fills the buffer pool: profile the steady state.
            session.take_profile();
        }
    }
    if let Some(dir) = &options.output_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (k, (name, t)) in outputs.iter().enumerate() {
            let path = dir.join(format!("output_{k}.pb"));
            write_value_pb(&path, name, t)
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    let in_order = times.clone();
    times.sort_by(f64::total_cmp);
    let summaries: Vec<OutputSummary> = outputs
        .iter()
        .map(|(name, v)| match v {
            Value::Tensor(t) => OutputSummary {
                name: name.clone(),
                dtype: t.dtype().to_string(),
                shape: t.shape().to_vec(),
            },
            Value::Maps(m) => OutputSummary {
                name: name.clone(),
                dtype: m.type_text(),
                shape: vec![m.len()],
            },
            Value::Sequence(seq) => OutputSummary {
                name: name.clone(),
                dtype: seq.type_text(),
                shape: vec![seq.len()],
            },
            Value::Optional(Some(inner)) => OutputSummary {
                name: name.clone(),
                dtype: format!("optional({})", inner.type_text()),
                shape: Vec::new(),
            },
            Value::Optional(None) => OutputSummary {
                name: name.clone(),
                dtype: "optional()".into(),
                shape: Vec::new(),
            },
        })
        .collect();
    let profile = profiled.then(|| ProfileSummary::of(&session.profile()));
    if options.json {
        let timing = Timing {
            runs: repeat,
            median_s: times[times.len() / 2],
            min_s: times[0],
            times_s: in_order,
            outputs: summaries,
            profile,
        };
        output::println_json(&timing, false)?;
    } else {
        for ((_, t), s) in outputs.iter().zip(&summaries) {
            output::println(&format!(
                "{} {}{:?} {}",
                s.name,
                s.dtype,
                s.shape,
                preview(t)
            ))?;
        }
        if repeat > 1 {
            output::eprintln(&format!(
                "{} runs: median {:.3} ms, min {:.3} ms",
                repeat,
                times[times.len() / 2] * 1e3,
                times[0] * 1e3
            ));
        }
        if let Some(profile) = profile {
            output::eprintln(&profile.text(repeat));
        }
    }
    Ok(Outcome::Success)
}

/// The first few elements of a value, for the summary on stdout; of a sequence, the first few
/// tensors with their shapes: `[float[2] [1, 2], float[1] [3]]`.
fn preview(v: &Value) -> String {
    const SHOWN: usize = 3;
    match v {
        Value::Tensor(t) => preview_tensor(t),
        Value::Maps(m) => preview_maps(m),
        Value::Sequence(seq) => {
            let mut items: Vec<String> = seq
                .tensors()
                .iter()
                .take(SHOWN)
                .map(|t| format!("{}{:?} {}", t.dtype(), t.shape(), preview_tensor(t)))
                .collect();
            if seq.len() > SHOWN {
                items.push("...".into());
            }
            format!("[{}]", items.join(", "))
        }
        Value::Optional(Some(inner)) => preview(inner),
        Value::Optional(None) => "empty".into(),
    }
}

/// The first few maps of a sequence: `[{4: 0.25, 7: 0.75}, ...]`.
fn preview_maps(m: &SequenceOfMaps) -> String {
    const SHOWN: usize = 3;
    let keys = m.keys();
    let mut items: Vec<String> = (0..m.len().min(SHOWN))
        .map(|i| {
            let row = m.row(i).unwrap_or_default();
            let pairs: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(j, v)| format!("{}: {v}", keys.key_text(j)))
                .collect();
            format!("{{{}}}", pairs.join(", "))
        })
        .collect();
    if m.len() > SHOWN {
        items.push("...".into());
    }
    format!("[{}]", items.join(", "))
}

/// The first few elements of a tensor.
fn preview_tensor(t: &Tensor) -> String {
    const SHOWN: usize = 8;
    let mut items: Vec<String> = (0..t.len().min(SHOWN))
        .map(|i| element_text(t, i))
        .collect();
    if t.len() > SHOWN {
        items.push("...".into());
    }
    format!("[{}]", items.join(", "))
}

fn element_text(t: &Tensor, i: usize) -> String {
    use multigather::DataType as D;
    fn show<T: ToString>(r: Result<&[T], multigather::tensor::TensorError>, i: usize) -> String {
        r.ok()
            .and_then(|v| v.get(i))
            .map_or_else(String::new, T::to_string)
    }
    match t.dtype() {
        D::Float => show(t.as_slice::<f32>(), i),
        D::Double => show(t.as_slice::<f64>(), i),
        D::Float16 => show(t.as_slice::<half::f16>(), i),
        D::Bfloat16 => show(t.as_slice::<half::bf16>(), i),
        D::Int8 => show(t.as_slice::<i8>(), i),
        D::Int16 => show(t.as_slice::<i16>(), i),
        D::Int32 => show(t.as_slice::<i32>(), i),
        D::Int64 => show(t.as_slice::<i64>(), i),
        D::Uint8 => show(t.as_slice::<u8>(), i),
        D::Uint16 => show(t.as_slice::<u16>(), i),
        D::Uint32 => show(t.as_slice::<u32>(), i),
        D::Uint64 => show(t.as_slice::<u64>(), i),
        D::Bool => show(t.as_slice::<u8>(), i)
            .replace('1', "true")
            .replace('0', "false"),
        D::String => t
            .as_strings()
            .ok()
            .and_then(|v| v.get(i))
            .map_or_else(String::new, |s| format!("{:?}", String::from_utf8_lossy(s))),
        _ => "?".into(),
    }
}
