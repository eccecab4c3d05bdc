//! `multigather rewrite`: the GatherToMultiaxis pass from file to file.

use std::path::Path;

use anyhow::{bail, Context, Result};
use multigather::interp::RunOptions;
use multigather::io::{ExternalPolicy, SaveOptions};
use multigather::pass::{DefineMultiaxisFunctions, GatherKind, GatherToMultiaxis, RewriteConfig};
use multigather::verify::DrawOptions;

use super::{output, Outcome};

/// Validated options of `multigather rewrite`.
pub struct RewriteArgs<'a> {
    pub model: &'a Path,
    pub output: &'a Path,
    pub in_place: bool,
    pub json: bool,
    pub ops: &'a [String],
    pub skip: &'a [String],
    pub save: SaveOptions,
    pub with_function_body: bool,
    /// Prove the rewrite before writing it: both models run on inputs drawn as `verify` draws
    /// them (seed 0) and must agree bit for bit.
    pub verify: bool,
    /// Print the unified diff of the text form before and after on standard output.
    pub diff: bool,
}

/// Parses `--ops` values into op kinds.
pub fn kinds(ops: &[String]) -> Result<Vec<GatherKind>> {
    if ops.is_empty() {
        return Ok(GatherKind::ALL.to_vec());
    }
    ops.iter()
        .map(|o| {
            GatherKind::from_name(o).with_context(|| {
                format!(
                    "unknown op kind '{o}' in --ops (expected Gather, GatherElements or GatherND)"
                )
            })
        })
        .collect()
}

/// Save options from `--external-data` / `--external-threshold`.
pub fn save_options(external: Option<&String>, threshold: usize) -> SaveOptions {
    SaveOptions {
        external: match external {
            Some(file) => ExternalPolicy::File {
                file: file.clone(),
                threshold,
            },
            None => ExternalPolicy::Keep,
        },
    }
}

/// Refuses to overwrite the input unless asked to.
pub fn check_output(input: &Path, output: &Path, in_place: bool) -> Result<()> {
    let same = match (input.canonicalize(), output.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same && !in_place {
        bail!(
            "output {} is the input file; pass --in-place to overwrite it",
            output.display()
        );
    }
    Ok(())
}

pub fn run(args: RewriteArgs) -> Result<Outcome> {
    check_output(args.model, args.output, args.in_place)?;
    if args.json && multigather::io::is_stdout_path(args.output) {
        bail!("--json prints the report on standard output, where the model goes; write the model to a file");
    }
    if args.diff && multigather::io::is_stdout_path(args.output) {
        bail!("--diff prints on standard output, where the model goes; write the model to a file");
    }
    if args.diff && args.json {
        bail!("--diff and --json both print on standard output; give one of them");
    }
    let config = RewriteConfig {
        kinds: kinds(args.ops)?,
        skip: args.skip.to_vec(),
    };
    let mut model = super::load(args.model)?;
    let original = (args.verify || args.diff).then(|| model.clone());
    let report = GatherToMultiaxis::rewrite(&mut model, config)
        .with_context(|| format!("rewriting {}", args.model.display()))?;
    if let Some(original) = original.as_ref().filter(|_| args.verify) {
        let proved = super::verify::prove(
            original,
            &model,
            &DrawOptions::default(),
            &RunOptions::default(),
        );
        let comparisons = match proved {
            // The interpreter lacks an operator: the rewrite is written, checked statically
            // only, and the message says so.
            Err(e) if super::verify::is_unsupported(&e) => {
                output::eprintln(&format!(
                    "not verified by running ({e:#}); the rewrite is written, checked \
                     statically only"
                ));
                None
            }
            other => Some(
                other
                    .context(
                        "verifying the rewrite (`multigather verify` takes --dim and --input)",
                    )?
                    .1,
            ),
        };
        let proved = comparisons.is_some();
        let comparisons = comparisons.unwrap_or_default();
        let different: Vec<&str> = comparisons
            .iter()
            .filter(|c| !c.identical)
            .map(|c| c.name.as_str())
            .collect();
        if !different.is_empty() {
            output::eprintln(&format!(
                "DIFFERENT: the rewritten model differs on {}; nothing was written",
                different.join(", ")
            ));
            return Ok(Outcome::CheckFailed);
        }
        if proved {
            output::eprintln(&format!(
                "verified: {} outputs identical bit for bit on random inputs",
                comparisons.len()
            ));
        }
    }
    // The diff of the rewrite itself, before any function bodies are defined; printed once the
    // model is saved.
    let diff = match (&original, args.diff) {
        (Some(original), true) => Some(multigather::text::model_diff(original, &model)),
        _ => None,
    };
    let functions = if args.with_function_body {
        let report = DefineMultiaxisFunctions::define(&mut model)
            .with_context(|| format!("defining functions in {}", args.model.display()))?;
        Some(report)
    } else {
        None
    };
    super::save(&model, args.output, &args.save)?;
    output::eprintln(&report.summary());
    if let Some(functions) = &functions {
        output::eprintln(&functions.summary());
    }
    if args.json {
        output::println(&serde_json::to_string_pretty(&report)?)?;
    }
    if let Some(diff) = &diff {
        output::print(diff)?;
    }
    Ok(Outcome::Success)
}
