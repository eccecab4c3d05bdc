//! `multigather lower`: the LowerMultiaxis pass from file to file. Exits 1 when some
//! `GatherMultiaxis` could not be lowered (the report on stderr says why); the output is written
//! anyway. With `--target-opset N` the lowered model imports opset N, and a node that cannot be
//! lowered or does not mean the same there is an error (exit 2, nothing written).

use anyhow::{Context, Result};
use multigather::io::SaveOptions;
use multigather::pass::LowerMultiaxis;

use super::options::Lower;
use super::{output, Outcome};

/// Lowers and saves the model; prints the report.
pub fn run(options: Lower) -> Result<Outcome> {
    let mut model = super::load(&options.model)?;
    let report = LowerMultiaxis::lower_with(&mut model, options.config)
        .with_context(|| format!("lowering {}", options.model.display()))?;
    super::save(&model, &options.output, &SaveOptions::default())?;
    output::eprintln(&report.summary());
    // The output is written either way, but it is standard ONNX only when nothing was skipped.
    Ok(if report.skipped == 0 {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}
