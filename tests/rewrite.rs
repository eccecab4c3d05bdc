//! The rewrite pass on every fixture: snapshots of the text form before and after, and the
//! properties every rewrite must have (valid result, no gather left, idempotent, names kept).

use std::path::Path;

use multigather::ir::Model;
use multigather::pass::{GatherKind, GatherToMultiaxis, NodeOutcome, RewriteConfig};
use multigather::text::model_to_text;

fn gathers_left(model: &Model) -> usize {
    let ops = model.op_histogram();
    GatherKind::ALL
        .iter()
        .map(|k| ops.get(k.name()).copied().unwrap_or(0))
        .sum()
}

#[test]
fn fixture_rewrites() {
    insta::glob!("../fixtures", "*/model.onnx", |path: &Path| {
        let original = multigather::io::load(path).unwrap();
        let mut model = original.clone();
        let report = GatherToMultiaxis::rewrite(&mut model, RewriteConfig::default()).unwrap();

        assert_eq!(report.skipped, 0, "{}", report.summary());
        assert_eq!(gathers_left(&model), 0, "{}", model_to_text(&model));
        let outputs = |m: &Model| m.graph.outputs.clone();
        assert_eq!(outputs(&original), outputs(&model), "graph outputs changed");
        let inputs = |m: &Model| m.graph.inputs.clone();
        assert_eq!(inputs(&original), inputs(&model), "graph inputs changed");

        // A second run finds nothing to do.
        let mut again = model.clone();
        let second = GatherToMultiaxis::rewrite(&mut again, RewriteConfig::default()).unwrap();
        assert_eq!(second.rewritten, 0);
        assert_eq!(again, model);

        // The saved model loads back to the same thing.
        let bytes = multigather::io::to_bytes(&model).unwrap();
        assert_eq!(multigather::io::load_bytes(&bytes).unwrap(), model);

        insta::assert_snapshot!(format!(
            "{}\n==> {}\n\n{}",
            model_to_text(&original),
            report.summary(),
            model_to_text(&model)
        ));
    });
}

#[test]
fn skip_patterns_and_op_selection_leave_nodes_alone() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/gather_chain/model.onnx");
    let mut model = multigather::io::load(&path).unwrap();
    let config = RewriteConfig {
        kinds: vec![GatherKind::Gather, GatherKind::GatherNd],
        skip: vec!["points".into()],
    };
    let report = GatherToMultiaxis::rewrite(&mut model, config).unwrap();
    assert_eq!(report.rewritten, 1);
    let reasons: Vec<(String, String)> = report
        .nodes
        .iter()
        .filter_map(|n| match &n.outcome {
            NodeOutcome::Skipped { reason } => Some((n.node.clone(), reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        reasons,
        [
            (
                "pick_elements".to_string(),
                "its op kind is not selected".to_string()
            ),
            (
                "pick_points".to_string(),
                "its name matches the skip pattern 'points'".to_string()
            ),
        ]
    );
    let ops = model.op_histogram();
    assert_eq!(ops.get("GatherElements"), Some(&1));
    assert_eq!(ops.get("GatherND"), Some(&1));
}

#[test]
fn unknown_rank_is_reported_not_guessed() {
    use multigather::ir::{Graph, Node, ValueInfo};
    let mut g = Graph::new("g");
    g.inputs.push(ValueInfo::untyped("data"));
    g.inputs.push(ValueInfo::untyped("idx"));
    g.outputs.push(ValueInfo::untyped("out"));
    g.add_node(Node::new("Gather", "opaque", ["data", "idx"], ["out"]));
    let mut model = Model::new(g, 13);
    let before = model.clone();
    let report = GatherToMultiaxis::rewrite(&mut model, RewriteConfig::default()).unwrap();
    assert_eq!(report.rewritten, 0);
    assert_eq!(
        report.nodes[0].outcome,
        NodeOutcome::Skipped {
            reason: "the rank of 'data' is unknown".into()
        }
    );
    assert_eq!(model, before);
}
