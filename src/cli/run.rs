//! `multigather run`: runs a model with the reference interpreter, optionally many times for
//! timing, and writes or summarises its outputs.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use multigather::interp::files::{read_inputs_dir, read_tensor, write_tensor_pb};
use multigather::interp::{RunOptions, Session};
use multigather::ir::Model;
use multigather::Tensor;
use serde::Serialize;

use super::{output, Outcome};

/// Validated options of `multigather run`.
pub struct RunArgs<'a> {
    pub model: &'a Path,
    pub inputs: Option<&'a Path>,
    pub input: &'a [String],
    pub output_dir: Option<&'a Path>,
    pub repeat: usize,
    pub threads: Option<usize>,
    pub max_memory: Option<usize>,
    pub json: bool,
}

#[derive(Serialize)]
struct Timing {
    runs: usize,
    median_s: f64,
    min_s: f64,
    outputs: Vec<OutputSummary>,
}

#[derive(Serialize)]
struct OutputSummary {
    name: String,
    dtype: String,
    shape: Vec<usize>,
}

/// Inputs from `--inputs DIR` and `--input NAME=FILE` (the latter override the former).
pub fn gather_inputs(
    model: &Model,
    dir: Option<&Path>,
    pairs: &[String],
) -> Result<Vec<(String, Tensor)>> {
    let mut inputs = match dir {
        Some(dir) => read_inputs_dir(&model.graph, dir)
            .with_context(|| format!("reading inputs from {}", dir.display()))?,
        None => Vec::new(),
    };
    for pair in pairs {
        let Some((name, file)) = pair.split_once('=') else {
            bail!("--input takes NAME=FILE, found '{pair}'");
        };
        let (_, tensor) = read_tensor(&PathBuf::from(file))?;
        inputs.retain(|(n, _)| n != name);
        inputs.push((name.to_owned(), tensor));
    }
    Ok(inputs)
}

pub fn run(args: RunArgs) -> Result<Outcome> {
    if args.repeat == 0 {
        bail!("--repeat must be at least 1");
    }
    let model = super::load(args.model)?;
    let inputs = gather_inputs(&model, args.inputs, args.input)?;
    let session = Session::with_options(
        &model,
        RunOptions {
            threads: args.threads,
            max_memory: args.max_memory,
        },
    );
    let context = || format!("running {}", args.model.display());
    session.check().with_context(context)?;
    let mut times = Vec::with_capacity(args.repeat);
    let mut outputs = Vec::new();
    for _ in 0..args.repeat {
        let start = Instant::now();
        outputs = session.run(inputs.clone()).with_context(context)?;
        times.push(start.elapsed().as_secs_f64());
    }
    if let Some(dir) = args.output_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (k, (name, t)) in outputs.iter().enumerate() {
            let path = dir.join(format!("output_{k}.pb"));
            write_tensor_pb(&path, name, t)
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    times.sort_by(f64::total_cmp);
    let summaries: Vec<OutputSummary> = outputs
        .iter()
        .map(|(name, t)| OutputSummary {
            name: name.clone(),
            dtype: t.dtype().to_string(),
            shape: t.shape().to_vec(),
        })
        .collect();
    if args.json {
        let timing = Timing {
            runs: args.repeat,
            median_s: times[times.len() / 2],
            min_s: times[0],
            outputs: summaries,
        };
        output::println(&serde_json::to_string(&timing)?)?;
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
        if args.repeat > 1 {
            output::eprintln(&format!(
                "{} runs: median {:.3} ms, min {:.3} ms",
                args.repeat,
                times[times.len() / 2] * 1e3,
                times[0] * 1e3
            ));
        }
    }
    Ok(Outcome::Success)
}

/// The first few elements of a tensor, for the summary on stdout.
fn preview(t: &Tensor) -> String {
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
    multigather::dispatch_float!(t.dtype(), T => show(t.as_slice::<T>(), i), _ => {
        multigather::dispatch_int!(t.dtype(), T => show(t.as_slice::<T>(), i), _ => match t.dtype() {
            D::Bool => show(t.as_slice::<u8>(), i).replace('1', "true").replace('0', "false"),
            D::String => t
                .as_strings()
                .ok()
                .and_then(|v| v.get(i))
                .map_or_else(String::new, |s| format!("{:?}", String::from_utf8_lossy(s))),
            _ => "?".into(),
        })
    })
}
