//! External data: saving weights beside the model, loading them back by mmap, keeping references
//! across a rewrite, and models over protobuf's 2 GiB limit.

use std::path::Path;

use bytes::Bytes;
use multigather::io::{self, ExternalPolicy, SaveOptions};
use multigather::ir::{Dim, Graph, Model, Node, Payload, StoredTensor, Type, ValueInfo};
use multigather::pass::{GatherToMultiaxis, RewriteConfig};
use multigather::DataType;

/// An embedding lookup whose table is an initializer of `rows` x 4 floats.
fn embedding_model(table: Bytes, rows: i64) -> Model {
    let mut g = Graph::new("embed");
    g.inputs.push(ValueInfo::new(
        "ids",
        Type::tensor(DataType::Int64, vec![Dim::Known(3)]),
    ));
    g.outputs.push(ValueInfo::new(
        "rows",
        Type::tensor(DataType::Float, vec![Dim::Known(3), Dim::Known(4)]),
    ));
    g.initializers.push(StoredTensor::raw(
        Some("table"),
        DataType::Float,
        &[rows, 4],
        table,
    ));
    g.initializers
        .push(StoredTensor::from_i64s(Some("small"), &[2], &[7, 8]));
    g.add_node(Node::new("Gather", "lookup", ["table", "ids"], ["rows"]));
    Model::new(g, 13)
}

fn table_bytes(rows: usize) -> Bytes {
    (0..rows * 4)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect::<Vec<u8>>()
        .into()
}

fn external_options(threshold: usize) -> SaveOptions {
    SaveOptions {
        external: ExternalPolicy::File {
            file: "weights.bin".into(),
            threshold,
        },
    }
}

fn payload_bytes(model: &Model, name: &str) -> Vec<u8> {
    model
        .graph
        .initializer(name)
        .unwrap()
        .le_bytes()
        .unwrap()
        .into_owned()
}

#[test]
fn external_data_reloads_identically() {
    let dir = tempfile::tempdir().unwrap();
    let original = embedding_model(table_bytes(1000), 1000);
    let path = dir.path().join("model.onnx");
    io::save_with(&original, &path, &external_options(1024)).unwrap();

    let weights = std::fs::metadata(dir.path().join("weights.bin")).unwrap();
    assert_eq!(weights.len(), 16_000);
    let loaded = io::load(&path).unwrap();
    let table = loaded.graph.initializer("table").unwrap();
    match &table.payload {
        Payload::External(e) => assert_eq!((e.location.as_str(), e.offset), ("weights.bin", 0)),
        other => panic!("expected external data, found {other:?}"),
    }
    // The small tensor stays inline.
    assert!(matches!(
        loaded.graph.initializer("small").unwrap().payload,
        Payload::Raw(_)
    ));
    assert_eq!(
        payload_bytes(&loaded, "table"),
        payload_bytes(&original, "table")
    );

    // Saving it elsewhere inlines the weights: same model as the original.
    let other = tempfile::tempdir().unwrap();
    let copy = other.path().join("copy.onnx");
    io::save(&loaded, &copy).unwrap();
    assert_eq!(io::load(&copy).unwrap(), original);
}

#[test]
fn rewriting_keeps_external_references_without_reading_weights() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.onnx");
    io::save_with(
        &embedding_model(table_bytes(1000), 1000),
        &path,
        &external_options(1024),
    )
    .unwrap();
    let weights = dir.path().join("weights.bin");
    let before = std::fs::metadata(&weights).unwrap().modified().unwrap();

    let mut model = io::load(&path).unwrap();
    GatherToMultiaxis::rewrite(&mut model, RewriteConfig::default()).unwrap();
    let out = dir.path().join("rewritten.onnx");
    io::save(&model, &out).unwrap();

    assert_eq!(
        std::fs::metadata(&weights).unwrap().modified().unwrap(),
        before
    );
    // The rewritten file is small: it refers to the weights instead of holding them.
    assert!(std::fs::metadata(&out).unwrap().len() < 4096);
    let reloaded = io::load(&out).unwrap();
    assert!(matches!(
        reloaded.graph.initializer("table").unwrap().payload,
        Payload::External(_)
    ));
}

/// A model whose weights exceed protobuf's 2 GiB limit: saving inline fails cleanly and leaves
/// nothing behind; saving with external data works and loads back by mmap.
#[test]
fn models_over_two_gib_need_external_data() {
    const ROWS: usize = (1 << 31) / 16 + 1024; // 2 GiB + 16 KiB of floats
    let dir = tempfile::tempdir().unwrap();
    // Zeroed memory is mapped lazily, so this costs no RAM until written.
    let table = Bytes::from(vec![0u8; ROWS * 16]);
    let model = embedding_model(table, ROWS as i64);

    let inline = dir.path().join("inline.onnx");
    let err = io::save_with(&model, &inline, &SaveOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("over protobuf's 2 GiB limit"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a failed save left files"
    );

    let path = dir.path().join("big.onnx");
    io::save_with(&model, &path, &external_options(1 << 20)).unwrap();
    assert_eq!(
        std::fs::metadata(dir.path().join("weights.bin"))
            .unwrap()
            .len(),
        (ROWS * 16) as u64
    );
    let loaded = io::load(&path).unwrap();
    let table = loaded.graph.initializer("table").unwrap();
    assert_eq!(table.stored_len(), ROWS * 16);
    assert_eq!(table.dims, [ROWS as i64, 4]);
    assert!(Path::new(&path).metadata().unwrap().len() < 4096);
}

#[test]
fn concurrent_saves_of_one_pair_never_mix_a_model_with_another_models_data() {
    // Two models of the same layout whose weights differ, told apart by their graph names, saved
    // again and again to the same model and data paths by two threads while a third loads the
    // pair: every load, and the pair left at the end, is one save's model with its own data.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    let model = |name: &str, fill: f32| {
        let table: Vec<u8> = (0..64 * 4).flat_map(|_| fill.to_le_bytes()).collect();
        let mut m = embedding_model(table.into(), 64);
        m.graph.name = name.into();
        m
    };
    let consistent = |m: &Model| {
        let want = if m.graph.name == "ones" { 1f32 } else { 2f32 };
        let bytes = payload_bytes(m, "table");
        bytes
            .chunks(4)
            .all(|c| f32::from_le_bytes(c.try_into().unwrap()) == want)
    };
    io::save_with(&model("ones", 1.0), &path, &external_options(0)).unwrap();
    let rounds = 60;
    std::thread::scope(|s| {
        for (name, fill) in [("ones", 1f32), ("twos", 2f32)] {
            let (m, path) = (model(name, fill), &path);
            s.spawn(move || {
                for _ in 0..rounds {
                    io::save_with(&m, path, &external_options(0)).unwrap();
                }
            });
        }
        s.spawn(|| {
            for _ in 0..rounds {
                let m = io::load(&path).unwrap();
                assert!(
                    consistent(&m),
                    "a load paired '{}' with other data",
                    m.graph.name
                );
            }
        });
    });
    let m = io::load(&path).unwrap();
    assert!(
        consistent(&m),
        "the saved pair is '{}' with other data",
        m.graph.name
    );
}
