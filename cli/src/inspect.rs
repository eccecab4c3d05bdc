//! `multigather inspect`: the text form of a model, or a JSON summary.

use anyhow::Result;
use multigather::ir::{Model, ValueInfo};
use multigather::text::{self, TextOptions};
use serde::Serialize;

use super::options::Inspect;
use super::{output, Outcome};

#[derive(Serialize)]
struct Summary<'a> {
    ir_version: Option<i64>,
    opset_import: Vec<(String, i64)>,
    producer: Option<&'a str>,
    nodes: usize,
    ops: std::collections::BTreeMap<String, usize>,
    inputs: Vec<Io>,
    outputs: Vec<Io>,
    initializers: usize,
    functions: Vec<String>,
}

#[derive(Serialize)]
struct Io {
    name: String,
    #[serde(rename = "type")]
    ty: String,
}

fn io(values: &[ValueInfo], model: &Model) -> Vec<Io> {
    values
        .iter()
        .filter(|v| model.graph.initializer(&v.name).is_none())
        .map(|v| Io {
            name: v.name.clone(),
            ty: v.ty.as_ref().map(text::type_to_text).unwrap_or_default(),
        })
        .collect()
}

/// Prints the model's text form, or its JSON summary.
pub fn run(options: Inspect) -> Result<Outcome> {
    let model = super::load(&options.model)?;
    if options.json {
        let ops = model.op_histogram();
        let summary = Summary {
            ir_version: model.ir_version,
            opset_import: model
                .opset_imports
                .iter()
                .map(|o| (o.domain().to_owned(), o.version))
                .collect(),
            producer: model.producer_name.as_deref(),
            nodes: ops.values().sum(),
            ops,
            inputs: io(&model.graph.inputs, &model),
            outputs: io(&model.graph.outputs, &model),
            initializers: model.graph.initializers.len(),
            functions: model
                .functions
                .iter()
                .map(|f| format!("{}.{}", f.domain, f.name))
                .collect(),
        };
        output::println_json(&summary, true)?;
    } else {
        let options = TextOptions {
            max_elements: options.max_elements,
            ..TextOptions::default()
        };
        output::print(&text::model_to_text_with(&model, &options))?;
    }
    Ok(Outcome::Success)
}
