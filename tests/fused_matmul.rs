//! A model saved by onnxruntime's graph optimizer (level EXTENDED; `fixtures/fused_matmul/`,
//! written by the `generate.py` next to it) whose `com.microsoft.FusedMatMul` nodes use `alpha`,
//! `transB`, `transBatchA` with `transB`, and `transBatchA` with `transA` times `transBatchB`,
//! fed by an embedding `Gather`: the interpreter agrees with the outputs onnxruntime recorded,
//! and the rewrite turns the Gather into `GatherMultiaxis`, leaves the fused nodes alone, and
//! computes the same bits.

mod common;

#[test]
fn onnxruntime_saved_fused_matmul_fixture_matches_onnxruntime_and_survives_the_rewrite() {
    let model = common::check_recorded_fixture("fused_matmul", 1);
    let fused = model
        .graph
        .nodes()
        .filter(|(_, n)| n.op_type == "FusedMatMul" && n.domain == "com.microsoft")
        .count();
    assert_eq!(fused, 4);
}
