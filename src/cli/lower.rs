//! `multigather lower`: the LowerMultiaxis pass from file to file. Exits 1 when some
//! `GatherMultiaxis` could not be lowered (the report on stderr says why); the output is written
//! anyway.

use std::path::Path;

use anyhow::{Context, Result};
use multigather::io::SaveOptions;
use multigather::pass::LowerMultiaxis;

use super::rewrite::check_output;
use super::{output, Outcome};

/// Validated options of `multigather lower`.
pub struct LowerArgs<'a> {
    pub model: &'a Path,
    pub output: &'a Path,
    pub in_place: bool,
}

pub fn run(args: LowerArgs) -> Result<Outcome> {
    check_output(args.model, args.output, args.in_place)?;
    let mut model = super::load(args.model)?;
    let report = LowerMultiaxis::lower(&mut model)
        .with_context(|| format!("lowering {}", args.model.display()))?;
    super::save(&model, args.output, &SaveOptions::default())?;
    output::eprintln(&report.summary());
    // The output is written either way, but it is standard ONNX only when nothing was skipped.
    Ok(if report.skipped == 0 {
        Outcome::Success
    } else {
        Outcome::CheckFailed
    })
}
