//! Every worked example of the four reference documents (`/work/shared/reference/`), run through
//! the mapping of its operator onto `GatherMultiaxis` ([`GatherPlan`]s from
//! `multigather::gather::map`), with the fast and the reference kernel.
//!
//! Each example is one function returning an [`Example`] (the plan, the operands, the expected
//! output and, for the proposal's examples, the intermediate shapes the document lists); each
//! test is named after the document and the example and calls the one [`check`] helper. The
//! proposal's draft (`multigather-draft.md`) repeats examples of the newest text
//! (`multigather-latest.txt`) word for word; those examples are tested once per document from
//! the same function.
//!
//! Where a document lists intermediate shapes that differ from the plan's (the proposal is not
//! consistent about the layout of single-axis block gathers), both are checked: the plan's
//! through the plan, the document's by running `GatherMultiaxis` on operands reshaped to them.
//! The reasons are in the "Decisions" section of `docs/gather-multiaxis.md`, whose own examples
//! are tested at the end (`spec_*`).

use multigather::gather::map::{directml, numpy, onnx, openvino};
use multigather::gather::{
    gather_multiaxis, logical_indices_shape, output_shape, GatherError, GatherPlan, GatherSpec,
    OutOfRange,
};
use multigather::{DataType, Tensor};

/// Shapes and axes of the `GatherMultiaxis` step of a mapping.
struct Steps {
    input: &'static [usize],
    indices: &'static [usize],
    gathered: &'static [usize],
    axes: &'static [usize],
}

/// What a document lists about the `GatherMultiaxis` step of an example.
enum Listed {
    /// Nothing.
    Nothing,
    /// Shapes the plan goes through exactly.
    Same(Steps),
    /// Another valid layout than the plan's (`plan`): both are checked.
    Other { listed: Steps, plan: Steps },
    /// Shapes that cannot hold the example's operands (checked to be so); only the plan's are
    /// checked.
    Inconsistent { listed: Steps, plan: Steps },
}

/// One worked example through one mapping.
struct Example {
    plan: GatherPlan,
    input: Tensor,
    indices: Tensor,
    /// The expected output: element type, shape and values.
    output: Tensor,
    listed: Listed,
}

/// Runs one example: the plan's shapes, the listed intermediate shapes, and the output of the
/// fast and the reference kernel.
fn check(e: Example) {
    let shapes = e
        .plan
        .shapes(e.input.shape(), e.indices.shape())
        .expect("the plan applies to the example's shapes");
    assert_eq!(shapes.output, e.output.shape(), "output shape");
    let plan_steps = |s: &Steps| {
        assert_eq!(shapes.input, s.input, "GatherMultiaxis input shape");
        assert_eq!(shapes.indices, s.indices, "GatherMultiaxis indices shape");
        assert_eq!(shapes.gathered, s.gathered, "GatherMultiaxis output shape");
        assert_eq!(e.plan.spec.axes, s.axes, "axes");
    };
    match &e.listed {
        Listed::Nothing => {}
        Listed::Same(s) => plan_steps(s),
        Listed::Other { listed, plan } => {
            plan_steps(plan);
            check_listed_layout(&e, listed);
        }
        Listed::Inconsistent { listed, plan } => {
            plan_steps(plan);
            let count = |shape: &[usize]| shape.iter().product::<usize>();
            assert!(
                count(listed.input) != e.input.len() || count(listed.indices) != e.indices.len(),
                "the listed shapes do hold the operands"
            );
        }
    }
    let fast = e.plan.apply(&e.input, &e.indices).expect("fast kernel");
    assert_eq!(fast, e.output, "fast kernel");
    let reference = e
        .plan
        .apply_reference(&e.input, &e.indices)
        .expect("reference kernel");
    assert_eq!(reference, e.output, "reference kernel");
}

/// Runs `GatherMultiaxis` on the operands reshaped to a document's own intermediate shapes.
fn check_listed_layout(e: &Example, listed: &Steps) {
    let input = e.input.clone().into_shape(listed.input).unwrap();
    let indices = e.indices.clone().into_shape(listed.indices).unwrap();
    let spec = GatherSpec::new(listed.axes.to_vec()).with_mode(e.plan.spec.mode);
    let gathered = gather_multiaxis(&input, &indices, &spec).unwrap();
    assert_eq!(
        gathered.shape(),
        listed.gathered,
        "listed GatherMultiaxis output"
    );
    assert_eq!(
        gathered.into_shape(e.output.shape()).unwrap(),
        e.output,
        "listed layout"
    );
}

/// Generates one test per (example, test name) pair.
macro_rules! examples {
    ($($example:ident => $($test:ident),+;)*) => {
        $($(
            #[test]
            fn $test() {
                check($example());
            }
        )+)*
    };
}

// ---- tensors ----

fn i32s(shape: &[usize], values: &[i32]) -> Tensor {
    Tensor::from_vec(DataType::Int32, shape, values.to_vec()).unwrap()
}

fn i64s(shape: &[usize], values: &[i64]) -> Tensor {
    Tensor::from_vec(DataType::Int64, shape, values.to_vec()).unwrap()
}

fn f32s(shape: &[usize], values: &[f32]) -> Tensor {
    Tensor::from_vec(DataType::Float, shape, values.to_vec()).unwrap()
}

/// An `int32` tensor whose element at each coordinate is `f(coordinate)`, for examples whose
/// document gives only shapes (or a formula) and whose values follow a closed form.
fn i32_from_fn(shape: &[usize], f: impl Fn(&[usize]) -> i32) -> Tensor {
    let count = shape.iter().product::<usize>();
    let values = (0..count)
        .map(|mut flat| {
            let mut coord = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                coord[d] = flat % shape[d];
                flat /= shape[d];
            }
            f(&coord)
        })
        .collect::<Vec<_>>();
    i32s(shape, &values)
}

/// The proposal's 4×3 input `[[0, 1, 2], [10, 11, 12], [20, 21, 22], [30, 31, 32]]`.
fn m43() -> Tensor {
    i32s(&[4, 3], &[0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32])
}

/// The proposal's 2×2×2 input `[[[0, 1], [2, 3]], [[4, 5], [6, 7]]]`.
fn cube() -> Tensor {
    i32s(&[2, 2, 2], &[0, 1, 2, 3, 4, 5, 6, 7])
}

/// `[[1, 2], [3, 4]]`, the input of the proposal's numpy examples.
fn m22() -> Tensor {
    i32s(&[2, 2], &[1, 2, 3, 4])
}

/// `GatherMultiaxis` itself, as a plan without shape operations.
fn multiaxis(axes: &[usize]) -> GatherPlan {
    multiaxis_mode(axes, OutOfRange::Error)
}

/// `GatherMultiaxis` itself with a mode.
fn multiaxis_mode(axes: &[usize], mode: OutOfRange) -> GatherPlan {
    GatherPlan {
        crop_input_to_indices: None,
        input: vec![],
        indices: vec![],
        spec: GatherSpec::new(axes.to_vec()).with_mode(mode),
        output: vec![],
    }
}

// ---- multigather-latest.txt and multigather-draft.md: the operator itself ----

/// "Example": input [4,2,1,2], indices [1,3,2,2], axes [1] -> output [4,3,2,2]. The document
/// gives shapes only; input `0..16`, indices chosen here (with negatives), output from numpy's
/// `take_along_axis` (which is this operator for one axis).
fn api_example() -> Example {
    Example {
        plan: numpy::take_along_axis(4, 4, Some(1)).unwrap(),
        input: i32_from_fn(&[4, 2, 1, 2], |c| (c[0] * 4 + c[1] * 2 + c[3]) as i32),
        indices: i64s(&[1, 3, 2, 2], &[0, 1, 1, 0, 1, 1, 0, 0, -1, 0, 1, -2]),
        output: i32s(
            &[4, 3, 2, 2],
            &[
                0, 3, 2, 1, 2, 3, 0, 1, 2, 1, 2, 1, 4, 7, 6, 5, 6, 7, 4, 5, 6, 5, 6, 5, 8, 11, 10,
                9, 10, 11, 8, 9, 10, 9, 10, 9, 12, 15, 14, 13, 14, 15, 12, 13, 14, 13, 14, 13,
            ],
        ),
        listed: Listed::Same(Steps {
            input: &[4, 2, 1, 2],
            indices: &[1, 3, 2, 2],
            gathered: &[4, 3, 2, 2],
            axes: &[1],
        }),
    }
}

/// Comment of `gatherMultiaxis`: input [2,3,1], indices [1,1,4], axes [1] -> output [2,1,4].
fn js_comment_1() -> Example {
    Example {
        plan: multiaxis(&[1]),
        input: i32s(&[2, 3, 1], &[0, 1, 2, 10, 11, 12]),
        indices: i64s(&[1, 1, 4], &[2, 0, -1, 1]),
        output: i32s(&[2, 1, 4], &[2, 0, 2, 1, 12, 10, 12, 11]),
        listed: Listed::Same(Steps {
            input: &[2, 3, 1],
            indices: &[1, 1, 4],
            gathered: &[2, 1, 4],
            axes: &[1],
        }),
    }
}

/// Comment of `gatherMultiaxis`: input [10,9,8], indices [1,5,6*2], axes [1,2] -> output
/// [10,5,6]. Input `100 i + 10 j + k`; the (j, k) pairs follow a formula (every odd column's
/// j counted from the end), so the output is `100 i + 10 j + k` of the pair.
fn js_comment_2() -> Example {
    let j = |b: usize, c: usize| (b + 2 * c) % 9;
    let k = |b: usize, c: usize| (3 * b + c) % 8;
    Example {
        plan: multiaxis(&[1, 2]),
        input: i32_from_fn(&[10, 9, 8], |x| (100 * x[0] + 10 * x[1] + x[2]) as i32),
        indices: i32_from_fn(&[1, 5, 12], |x| {
            let (b, c) = (x[1], x[2] / 2);
            match (x[2] % 2, c % 2) {
                (0, 0) => j(b, c) as i32,
                (0, _) => j(b, c) as i32 - 9,
                _ => k(b, c) as i32,
            }
        }),
        output: i32_from_fn(&[10, 5, 6], |x| {
            (100 * x[0] + 10 * j(x[1], x[2]) + k(x[1], x[2])) as i32
        }),
        listed: Listed::Same(Steps {
            input: &[10, 9, 8],
            indices: &[1, 5, 12],
            gathered: &[10, 5, 6],
            axes: &[1, 2],
        }),
    }
}

/// `broadcastShapeWith` (newest text only): "first [1,3,1] with second [2,1,4] yields shape
/// [2,3,4]" — with no axes the operator broadcasts the input to the indices' shape.
fn js_broadcast_shape_with() -> Example {
    Example {
        plan: multiaxis(&[]),
        input: i32s(&[1, 3, 1], &[7, 8, 9]),
        indices: i64s(&[2, 1, 4], &[0; 8]),
        output: i32_from_fn(&[2, 3, 4], |c| 7 + c[1] as i32),
        listed: Listed::Nothing,
    }
}

/// `broadcastShapeWith`: "If two corresponding coordinates are > 1, the first one wins (not an
/// error). e.g. [2,1] and [3,4] yield [2,4]." Decided otherwise: an error.
#[test]
fn latest_js_broadcast_first_wins_is_an_error() {
    assert_eq!(
        output_shape(&[2, 1], &[3, 4], &GatherSpec::new(vec![])),
        Err(GatherError::NotBroadcastable {
            dim: 0,
            input: 2,
            indices: 3
        })
    );
}

/// "An indices logical shape [2,4] with 3D coordinates would have an actual shape [2,4*3]".
#[test]
fn latest_logical_indices_shape_example() {
    let spec = GatherSpec::new(vec![0, 1, 2]);
    assert_eq!(logical_indices_shape(&[2, 12], &spec), Ok(vec![2, 4]));
    // As an operator call it needs rank 3 at least (three distinct axes).
    assert_eq!(
        output_shape(&[3, 4, 5], &[1, 2, 12], &spec),
        Ok(vec![1, 2, 4])
    );
    assert_eq!(
        logical_indices_shape(&[2, 13], &spec),
        Err(GatherError::LastDimNotMultiple {
            last: 13,
            coordinate_size: 3
        })
    );
}

// ---- the proposal: single-axis same rank (GatherElements) ----

fn gather_elements_1() -> Example {
    Example {
        plan: onnx::gather_elements(2, 0).unwrap(),
        input: m43(),
        indices: i64s(&[2, 3], &[3, 1, 1, 2, 0, 3]),
        output: i32s(&[2, 3], &[30, 11, 12, 20, 1, 32]),
        listed: Listed::Nothing,
    }
}

fn gather_elements_2() -> Example {
    Example {
        plan: onnx::gather_elements(2, 1).unwrap(),
        input: m43(),
        indices: i64s(&[4, 1], &[2, 1, 0, 2]),
        output: i32s(&[4, 1], &[2, 11, 20, 32]),
        listed: Listed::Nothing,
    }
}

fn gather_elements_3() -> Example {
    Example {
        plan: onnx::gather_elements(3, 0).unwrap(),
        input: i32s(
            &[4, 2, 2],
            &[
                0, 1, 10, 11, 100, 101, 110, 111, 200, 201, 210, 211, 300, 301, 310, 311,
            ],
        ),
        indices: i64s(&[1, 2, 2], &[0, 2, 1, 3]),
        output: i32s(&[1, 2, 2], &[0, 201, 110, 311]),
        listed: Listed::Nothing,
    }
}

// ---- the proposal: single-axis blocks (ONNX Gather) ----

/// Table row 1: data (P, Q), scalar indices, axis 0 -> (Q); reshaped (P, Q) (1, 1) (1, Q).
/// P, Q = 4, 3.
fn gather_table_1() -> Example {
    Example {
        plan: onnx::gather(2, 0, 0).unwrap(),
        input: m43(),
        indices: i64s(&[], &[2]),
        output: i32s(&[3], &[20, 21, 22]),
        listed: Listed::Same(Steps {
            input: &[4, 3],
            indices: &[1, 1],
            gathered: &[1, 3],
            axes: &[0],
        }),
    }
}

/// Input `100 p + 10 q + r` of shape (P, Q, R) = (2, 3, 2), for the table's rank-3 rows.
fn pqr() -> Tensor {
    i32_from_fn(&[2, 3, 2], |c| (100 * c[0] + 10 * c[1] + c[2]) as i32)
}

/// Table row 2: data (P, Q, R), scalar indices, axis 1 -> (P, R); reshaped (P, Q, R) (1, 1, 1)
/// (P, 1, R).
fn gather_table_2() -> Example {
    Example {
        plan: onnx::gather(3, 0, 1).unwrap(),
        input: pqr(),
        indices: i64s(&[], &[-1]),
        output: i32s(&[2, 2], &[20, 21, 120, 121]),
        listed: Listed::Same(Steps {
            input: &[2, 3, 2],
            indices: &[1, 1, 1],
            gathered: &[2, 1, 2],
            axes: &[1],
        }),
    }
}

/// Table row 3: data (P, Q, R), indices (S), axis 1 -> (P, S, R); the table reshapes to
/// (P, Q, 1, R) (1, 1, S, 1) (P, 1, S, R). S = 4.
fn gather_table_3() -> Example {
    Example {
        plan: onnx::gather(3, 1, 1).unwrap(),
        input: pqr(),
        indices: i64s(&[4], &[2, 0, -1, 1]),
        output: i32s(
            &[2, 4, 2],
            &[
                20, 21, 0, 1, 20, 21, 10, 11, 120, 121, 100, 101, 120, 121, 110, 111,
            ],
        ),
        listed: Listed::Other {
            listed: Steps {
                input: &[2, 3, 1, 2],
                indices: &[1, 1, 4, 1],
                gathered: &[2, 1, 4, 2],
                axes: &[1],
            },
            plan: Steps {
                input: &[2, 3, 2],
                indices: &[1, 4, 1],
                gathered: &[2, 4, 2],
                axes: &[1],
            },
        },
    }
}

/// Table row 4: data (P, Q), indices (R, S), axis 0 -> (R, S, Q); the table reshapes to
/// (P, 1, 1, Q) (1, R, S, 1) (1, R, S, Q). R, S = 2, 2.
fn gather_table_4() -> Example {
    Example {
        plan: onnx::gather(2, 2, 0).unwrap(),
        input: m43(),
        indices: i64s(&[2, 2], &[3, 1, 0, -2]),
        output: i32s(&[2, 2, 3], &[30, 31, 32, 10, 11, 12, 0, 1, 2, 20, 21, 22]),
        listed: Listed::Other {
            listed: Steps {
                input: &[4, 1, 1, 3],
                indices: &[1, 2, 2, 1],
                gathered: &[1, 2, 2, 3],
                axes: &[0],
            },
            plan: Steps {
                input: &[4, 1, 3],
                indices: &[2, 2, 1],
                gathered: &[2, 2, 3],
                axes: &[0],
            },
        },
    }
}

/// Table row 5: data (P, Q), indices (R, S), axis 1 -> (P, R, S); the table reshapes to
/// (P, Q, 1, 1) (1, 1, R, S) (P, 1, R, S).
fn gather_table_5() -> Example {
    Example {
        plan: onnx::gather(2, 2, 1).unwrap(),
        input: m43(),
        indices: i64s(&[2, 2], &[2, 0, 1, -1]),
        output: i32s(
            &[4, 2, 2],
            &[2, 0, 1, 2, 12, 10, 11, 12, 22, 20, 21, 22, 32, 30, 31, 32],
        ),
        listed: Listed::Other {
            listed: Steps {
                input: &[4, 3, 1, 1],
                indices: &[1, 1, 2, 2],
                gathered: &[4, 1, 2, 2],
                axes: &[1],
            },
            plan: Steps {
                input: &[4, 3, 1],
                indices: &[1, 2, 2],
                gathered: &[4, 2, 2],
                axes: &[1],
            },
        },
    }
}

fn gather_1() -> Example {
    Example {
        plan: onnx::gather(2, 1, 0).unwrap(),
        input: m43(),
        indices: i64s(&[2], &[3, 1]),
        output: i32s(&[2, 3], &[30, 31, 32, 10, 11, 12]),
        listed: Listed::Same(Steps {
            input: &[4, 3],
            indices: &[2, 1],
            gathered: &[2, 3],
            axes: &[0],
        }),
    }
}

fn gather_2() -> Example {
    Example {
        plan: onnx::gather(2, 1, 1).unwrap(),
        input: m43(),
        indices: i64s(&[5], &[2, 1, 0, 1, 2]),
        output: i32s(
            &[4, 5],
            &[
                2, 1, 0, 1, 2, 12, 11, 10, 11, 12, 22, 21, 20, 21, 22, 32, 31, 30, 31, 32,
            ],
        ),
        listed: Listed::Same(Steps {
            input: &[4, 3],
            indices: &[1, 5],
            gathered: &[4, 5],
            axes: &[1],
        }),
    }
}

/// The document lists input [4,1,3], axes [2] (the gathered axis takes the *last* index
/// dimension); the plan unsqueezes after the axis (input [4,3,1], axes [1]), as in the
/// document's own last example.
fn gather_3() -> Example {
    Example {
        plan: onnx::gather(2, 2, 1).unwrap(),
        input: m43(),
        indices: i64s(&[2, 2], &[0, 1, 1, 2]),
        output: i32s(
            &[4, 2, 2],
            &[0, 1, 1, 2, 10, 11, 11, 12, 20, 21, 21, 22, 30, 31, 31, 32],
        ),
        listed: Listed::Other {
            listed: Steps {
                input: &[4, 1, 3],
                indices: &[1, 2, 2],
                gathered: &[4, 2, 2],
                axes: &[2],
            },
            plan: Steps {
                input: &[4, 3, 1],
                indices: &[1, 2, 2],
                gathered: &[4, 2, 2],
                axes: &[1],
            },
        },
    }
}

/// Scalar indices. The document lists indices [2,1] and output [2,2] (copied from the next
/// example): one index cannot have shape [2,1]. The plan gathers [1,2] and squeezes axis 0.
fn gather_4() -> Example {
    Example {
        plan: onnx::gather(2, 0, 0).unwrap(),
        input: m22(),
        indices: i64s(&[], &[1]),
        output: i32s(&[2], &[3, 4]),
        listed: Listed::Inconsistent {
            listed: Steps {
                input: &[2, 2],
                indices: &[2, 1],
                gathered: &[2, 2],
                axes: &[0],
            },
            plan: Steps {
                input: &[2, 2],
                indices: &[1, 1],
                gathered: &[1, 2],
                axes: &[0],
            },
        },
    }
}

fn gather_5() -> Example {
    Example {
        plan: onnx::gather(2, 1, 0).unwrap(),
        input: m22(),
        indices: i64s(&[2], &[1, 0]),
        output: i32s(&[2, 2], &[3, 4, 1, 2]),
        listed: Listed::Same(Steps {
            input: &[2, 2],
            indices: &[2, 1],
            gathered: &[2, 2],
            axes: &[0],
        }),
    }
}

fn gather_6() -> Example {
    Example {
        plan: onnx::gather(2, 2, 0).unwrap(),
        input: m22(),
        indices: i64s(&[2, 2], &[1, 0, 0, 1]),
        output: i32s(&[2, 2, 2], &[3, 4, 1, 2, 1, 2, 3, 4]),
        listed: Listed::Same(Steps {
            input: &[2, 1, 2],
            indices: &[2, 2, 1],
            gathered: &[2, 2, 2],
            axes: &[0],
        }),
    }
}

// ---- the proposal: multiple axes blocks (ONNX GatherND) ----

/// The ONNX GatherND examples quoted in the comment of `gatherNdBlocks` (newest text only).
fn gather_nd_onnx_1() -> Example {
    Example {
        plan: onnx::gather_nd(2, 2, 2, 0).unwrap(),
        input: i32s(&[2, 2], &[0, 1, 2, 3]),
        indices: i64s(&[2, 2], &[0, 0, 1, 1]),
        output: i32s(&[2], &[0, 3]),
        listed: Listed::Nothing,
    }
}

fn gather_nd_onnx_2() -> Example {
    Example {
        plan: onnx::gather_nd(2, 2, 1, 0).unwrap(),
        input: i32s(&[2, 2], &[0, 1, 2, 3]),
        indices: i64s(&[2, 1], &[1, 0]),
        output: i32s(&[2, 2], &[2, 3, 0, 1]),
        listed: Listed::Nothing,
    }
}

fn gather_nd_onnx_4() -> Example {
    Example {
        plan: onnx::gather_nd(3, 3, 2, 0).unwrap(),
        input: cube(),
        indices: i64s(&[2, 1, 2], &[0, 1, 1, 0]),
        output: i32s(&[2, 1, 2], &[2, 3, 4, 5]),
        listed: Listed::Nothing,
    }
}

/// ONNX example 3 without the listed shapes.
fn gather_nd_onnx_3() -> Example {
    Example {
        listed: Listed::Nothing,
        ..gather_nd_1()
    }
}

/// ONNX example 5 without the listed shapes.
fn gather_nd_onnx_5() -> Example {
    Example {
        listed: Listed::Nothing,
        ..gather_nd_3()
    }
}

/// The document prepends a unit dimension to the indices ([1,2,1*2]); the plan inserts it
/// before the coordinates ([2,1,2]) and squeezes it from the output.
fn gather_nd_1() -> Example {
    Example {
        plan: onnx::gather_nd(3, 2, 2, 0).unwrap(),
        input: cube(),
        indices: i64s(&[2, 2], &[0, 1, 1, 0]),
        output: i32s(&[2, 2], &[2, 3, 4, 5]),
        listed: Listed::Other {
            listed: Steps {
                input: &[2, 2, 2],
                indices: &[1, 2, 2],
                gathered: &[1, 2, 2],
                axes: &[0, 1],
            },
            plan: Steps {
                input: &[2, 2, 2],
                indices: &[2, 1, 2],
                gathered: &[2, 1, 2],
                axes: &[0, 1],
            },
        },
    }
}

fn gather_nd_2() -> Example {
    Example {
        plan: onnx::gather_nd(3, 2, 1, 0).unwrap(),
        input: cube(),
        indices: i64s(&[3, 1], &[1, 0, 1]),
        output: i32s(&[3, 2, 2], &[4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7]),
        listed: Listed::Same(Steps {
            input: &[2, 2, 2],
            indices: &[3, 1, 1],
            gathered: &[3, 2, 2],
            axes: &[0],
        }),
    }
}

fn gather_nd_3() -> Example {
    Example {
        plan: onnx::gather_nd(3, 2, 1, 1).unwrap(),
        input: cube(),
        indices: i64s(&[2, 1], &[1, 0]),
        output: i32s(&[2, 2], &[2, 3, 4, 5]),
        listed: Listed::Same(Steps {
            input: &[2, 2, 2],
            indices: &[2, 1, 1],
            gathered: &[2, 1, 2],
            axes: &[1],
        }),
    }
}

fn gather_nd_4() -> Example {
    Example {
        plan: onnx::gather_nd(3, 2, 3, 0).unwrap(),
        input: cube(),
        indices: i64s(&[5, 3], &[0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1]),
        output: i32s(&[5], &[1, 2, 4, 6, 7]),
        listed: Listed::Same(Steps {
            input: &[2, 2, 2],
            indices: &[5, 1, 3],
            gathered: &[5, 1, 1],
            axes: &[0, 1, 2],
        }),
    }
}

/// "Demonstrates broadcasting of leading input dimensions (since 1, not 2)": batch_dims 1 with
/// a data batch of 1 against an indices batch of 2 (newest text only). ONNX GatherND would
/// reject it; the mapping broadcasts.
fn gather_nd_broadcast_batch() -> Example {
    Example {
        plan: onnx::gather_nd(2, 2, 1, 1).unwrap(),
        input: i32s(&[1, 3], &[0, 1, 2]),
        indices: i64s(&[2, 1], &[1, 2]),
        output: i32s(&[2], &[1, 2]),
        listed: Listed::Nothing,
    }
}

// ---- the proposal's "Reference" test code (numpy) ----
// Three of its comments are stale (they show the output of another call); the values here are
// what the calls compute.

fn numpy_take_scalar() -> Example {
    Example {
        plan: numpy::take(2, 0, Some(0)).unwrap(),
        input: m22(),
        indices: i64s(&[], &[1]),
        output: i32s(&[2], &[3, 4]),
        listed: Listed::Nothing,
    }
}

/// The comment claims `[[[3 4], [1 2]], [[1 2], [3 4]]]`, the next call's output.
fn numpy_take_vector() -> Example {
    Example {
        plan: numpy::take(2, 1, Some(0)).unwrap(),
        input: m22(),
        indices: i64s(&[2], &[1, 0]),
        output: i32s(&[2, 2], &[3, 4, 1, 2]),
        listed: Listed::Nothing,
    }
}

fn numpy_take_matrix() -> Example {
    Example {
        plan: numpy::take(2, 2, Some(0)).unwrap(),
        input: m22(),
        indices: i64s(&[2, 2], &[1, 0, 0, 1]),
        output: i32s(&[2, 2, 2], &[3, 4, 1, 2, 1, 2, 3, 4]),
        listed: Listed::Nothing,
    }
}

fn numpy_take_axis_1() -> Example {
    Example {
        plan: numpy::take(2, 1, Some(1)).unwrap(),
        ..gather_2()
    }
}

/// `gather_elements` on the 4×3 input along axis 1; the comment's `[[1, 2], [4, 3]]` is for the
/// 2×2 input.
fn numpy_gather_elements() -> Example {
    Example {
        plan: onnx::gather_elements(2, 1).unwrap(),
        input: m43(),
        indices: i64s(&[2, 2], &[0, 1, 1, 0]),
        output: i32s(&[2, 2], &[0, 1, 11, 10]),
        listed: Listed::Nothing,
    }
}

/// `data[tuple(indices.T)]` on the 4×3 input; the comment's `[1, 4]` is for the 2×2 input.
fn numpy_gather_nd() -> Example {
    Example {
        plan: onnx::gather_nd(2, 2, 2, 0).unwrap(),
        input: m43(),
        indices: i64s(&[2, 2], &[0, 0, 1, 1]),
        output: i32s(&[2], &[0, 11]),
        listed: Listed::Nothing,
    }
}

examples! {
    api_example => latest_api_example, draft_api_example;
    js_comment_1 => latest_js_comment_example_1, draft_js_comment_example_1;
    js_comment_2 => latest_js_comment_example_2, draft_js_comment_example_2;
    js_broadcast_shape_with => latest_js_broadcast_shape_with_example;
    gather_elements_1 => latest_gather_elements_example_1, draft_gather_elements_example_1;
    gather_elements_2 => latest_gather_elements_example_2, draft_gather_elements_example_2;
    gather_elements_3 => latest_gather_elements_example_3, draft_gather_elements_example_3;
    gather_table_1 => latest_gather_blocks_table_row_1;
    gather_table_2 => latest_gather_blocks_table_row_2;
    gather_table_3 => latest_gather_blocks_table_row_3;
    gather_table_4 => latest_gather_blocks_table_row_4;
    gather_table_5 => latest_gather_blocks_table_row_5;
    gather_1 => latest_gather_blocks_example_1, draft_gather_blocks_example_1;
    gather_2 => latest_gather_blocks_example_2, draft_gather_blocks_example_2;
    gather_3 => latest_gather_blocks_example_3, draft_gather_blocks_example_3;
    gather_4 => latest_gather_blocks_example_4, draft_gather_blocks_example_4;
    gather_5 => latest_gather_blocks_example_5, draft_gather_blocks_example_5;
    gather_6 => latest_gather_blocks_example_6, draft_gather_blocks_example_6;
    gather_nd_onnx_1 => latest_gather_nd_onnx_example_1;
    gather_nd_onnx_2 => latest_gather_nd_onnx_example_2;
    gather_nd_onnx_3 => latest_gather_nd_onnx_example_3;
    gather_nd_onnx_4 => latest_gather_nd_onnx_example_4;
    gather_nd_onnx_5 => latest_gather_nd_onnx_example_5;
    gather_nd_1 => latest_gather_nd_example_1, draft_gather_nd_example_1;
    gather_nd_2 => latest_gather_nd_example_2, draft_gather_nd_example_2;
    gather_nd_3 => latest_gather_nd_example_3, draft_gather_nd_example_3;
    gather_nd_4 => latest_gather_nd_example_4, draft_gather_nd_example_4;
    gather_nd_broadcast_batch => latest_gather_nd_broadcast_batch_example;
    numpy_take_scalar => latest_reference_code_take_scalar, draft_reference_code_take_scalar;
    numpy_take_vector => latest_reference_code_take_vector, draft_reference_code_take_vector;
    numpy_take_matrix => latest_reference_code_take_matrix, draft_reference_code_take_matrix;
    numpy_take_axis_1 => latest_reference_code_take_axis_1, draft_reference_code_take_axis_1;
    numpy_gather_elements => latest_reference_code_gather_elements, draft_reference_code_gather_elements;
    numpy_gather_nd => latest_reference_code_gather_nd, draft_reference_code_gather_nd;
}

// ---- openvino-gather-8.txt ----

fn ov_data_5() -> Tensor {
    i32s(&[5], &[1, 2, 3, 4, 5])
}

fn ov_data_2x5() -> Tensor {
    i32s(&[2, 5], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
}

fn openvino_1() -> Example {
    Example {
        plan: openvino::gather8(1, 1, 0, 0).unwrap(),
        input: ov_data_5(),
        indices: i64s(&[3], &[0, 0, 4]),
        output: i32s(&[3], &[1, 1, 5]),
        listed: Listed::Nothing,
    }
}

fn openvino_2() -> Example {
    Example {
        plan: openvino::gather8(2, 2, 1, 1).unwrap(),
        input: ov_data_2x5(),
        indices: i64s(&[2, 3], &[0, 0, 4, 4, 0, 0]),
        output: i32s(&[2, 3], &[1, 1, 5, 10, 6, 6]),
        listed: Listed::Nothing,
    }
}

fn openvino_3() -> Example {
    Example {
        plan: openvino::gather8(3, 3, 2, 2).unwrap(),
        input: i32_from_fn(&[2, 2, 5], |c| (c[0] * 10 + c[1] * 5 + c[2] + 1) as i32),
        indices: i64s(&[2, 2, 3], &[0, 0, 4, 4, 0, 0, 1, 2, 4, 4, 3, 2]),
        output: i32s(&[2, 2, 3], &[1, 1, 5, 10, 6, 6, 12, 13, 15, 20, 19, 18]),
        listed: Listed::Nothing,
    }
}

fn openvino_4() -> Example {
    Example {
        plan: openvino::gather8(4, 2, 2, 1).unwrap(),
        input: i32_from_fn(&[2, 1, 5, 4], |c| (c[0] * 20 + c[2] * 4 + c[3] + 1) as i32),
        indices: i64s(&[2, 3], &[1, 2, 4, 4, 3, 2]),
        output: i32s(
            &[2, 1, 3, 4],
            &[
                5, 6, 7, 8, 9, 10, 11, 12, 17, 18, 19, 20, 37, 38, 39, 40, 33, 34, 35, 36, 29, 30,
                31, 32,
            ],
        ),
        listed: Listed::Nothing,
    }
}

fn openvino_5() -> Example {
    Example {
        plan: openvino::gather8(2, 2, 1, -1).unwrap(),
        ..openvino_2()
    }
}

fn openvino_6() -> Example {
    Example {
        plan: openvino::gather8(1, 1, 0, 0).unwrap(),
        input: ov_data_5(),
        indices: i64s(&[3], &[0, -2, -1]),
        output: i32s(&[3], &[1, 4, 5]),
        listed: Listed::Nothing,
    }
}

fn openvino_7() -> Example {
    Example {
        plan: openvino::gather8(1, 1, 0, 0).unwrap(),
        input: ov_data_5(),
        indices: i64s(&[3], &[3, 10, -20]),
        output: i32s(&[3], &[4, 0, 0]),
        listed: Listed::Nothing,
    }
}

/// The IR layer: data (2, 64, 128), indices (2, 32, 21), axis 1, batch_dims 1 -> (2, 32, 21,
/// 128). Shapes only in the document; input = its flat position, indices follow a formula with
/// negatives, output `data[b, idx[b, i, j], t]`.
fn openvino_layer() -> Example {
    let index = |c: &[usize]| (7 * c[0] + 3 * c[1] + 5 * c[2]) % 64;
    Example {
        plan: openvino::gather8(3, 3, 1, 1).unwrap(),
        input: i32_from_fn(&[2, 64, 128], |c| (c[0] * 8192 + c[1] * 128 + c[2]) as i32),
        indices: i32_from_fn(&[2, 32, 21], |c| {
            index(c) as i32 - if c[2] % 2 == 1 { 64 } else { 0 }
        }),
        output: i32_from_fn(&[2, 32, 21, 128], |c| {
            (c[0] * 8192 + index(c) * 128 + c[3]) as i32
        }),
        listed: Listed::Nothing,
    }
}

examples! {
    openvino_1 => openvino_example_1;
    openvino_2 => openvino_example_2;
    openvino_3 => openvino_example_3;
    openvino_4 => openvino_example_4;
    openvino_5 => openvino_example_5;
    openvino_6 => openvino_example_6;
    openvino_7 => openvino_example_7;
    openvino_layer => openvino_layer_example;
}

// ---- directml-gather.txt ----
// UINT32 indices become int32 (GatherMultiaxis takes int32 and int64).

fn m32() -> Tensor {
    f32s(&[3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
}

fn directml_1() -> Example {
    Example {
        plan: directml::gather(1, 0, 1).unwrap(),
        input: f32s(&[4], &[11.0, 12.0, 13.0, 14.0]),
        indices: i32s(&[5], &[3, 1, 3, 0, 2]),
        output: f32s(&[5], &[14.0, 12.0, 14.0, 11.0, 13.0]),
        listed: Listed::Nothing,
    }
}

fn directml_2() -> Example {
    Example {
        plan: directml::gather(2, 0, 1).unwrap(),
        input: m32(),
        indices: i32s(&[1, 4], &[0, 1, 1, 2]),
        output: f32s(&[4, 2], &[1.0, 2.0, 3.0, 4.0, 3.0, 4.0, 5.0, 6.0]),
        listed: Listed::Nothing,
    }
}

/// Listed with IndexDimensions 2, which breaks the document's own rule (input rank 2 +
/// IndexDimensions 2 - 1 = 3 relevant output dimensions > 2); its output and formula
/// `output[y, x] = input[y, indices[x]]` are those of IndexDimensions 1.
fn directml_3() -> Example {
    Example {
        plan: directml::gather(2, 1, 1).unwrap(),
        input: m32(),
        indices: i32s(&[1, 2], &[1, 0]),
        output: f32s(&[3, 2], &[2.0, 1.0, 4.0, 3.0, 6.0, 5.0]),
        listed: Listed::Nothing,
    }
}

#[test]
fn directml_example_3_as_listed_is_rejected() {
    let plan = directml::gather(2, 1, 2).unwrap();
    let err = plan.shapes(&[3, 2], &[1, 2]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Squeeze[0] cannot apply to shape [3, 1, 2]: dimension 0 has size 3, not 1"
    );
}

fn directml_4() -> Example {
    Example {
        plan: directml::gather(3, 2, 2).unwrap(),
        input: f32s(&[1, 3, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]),
        indices: i32s(&[1, 1, 2], &[0, 2]),
        output: f32s(&[3, 1, 2], &[1.0, 3.0, 4.0, 6.0, 7.0, 9.0]),
        listed: Listed::Nothing,
    }
}

fn directml_5() -> Example {
    Example {
        plan: directml::gather(3, 1, 2).unwrap(),
        input: m32().into_shape(&[1, 3, 2]).unwrap(),
        indices: i32s(&[1, 2, 2], &[0, 1, 1, 2]),
        output: f32s(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 3.0, 4.0, 5.0, 6.0]),
        listed: Listed::Nothing,
    }
}

examples! {
    directml_1 => directml_example_1;
    directml_2 => directml_example_2;
    directml_3 => directml_example_3;
    directml_4 => directml_example_4;
    directml_5 => directml_example_5;
}

// ---- docs/gather-multiaxis.md: the specification's own examples ----

/// `[[0, 1, 2], [10, 11, 12]]`.
fn m23() -> Tensor {
    i32s(&[2, 3], &[0, 1, 2, 10, 11, 12])
}

/// Points as (y, x) pairs.
fn spec_points_yx() -> Example {
    Example {
        plan: multiaxis(&[0, 1]),
        input: m23(),
        indices: i64s(&[3, 2], &[1, 2, 0, -1, 1, 0]),
        output: i32s(&[3, 1], &[12, 2, 10]),
        listed: Listed::Nothing,
    }
}

/// The same points as (x, y) pairs: the order of `axes` is the order of the coordinates.
fn spec_points_xy() -> Example {
    Example {
        plan: multiaxis(&[1, 0]),
        indices: i64s(&[3, 2], &[2, 1, -1, 0, 0, 1]),
        ..spec_points_yx()
    }
}

fn spec_modes(mode: OutOfRange, output: &[i32]) -> Example {
    Example {
        plan: multiaxis_mode(&[0], mode),
        input: i32s(&[5], &[10, 20, 30, 40, 50]),
        indices: i64s(&[6], &[0, -1, 4, 5, -6, 9]),
        output: i32s(&[6], output),
        listed: Listed::Nothing,
    }
}

fn spec_mode_zero() -> Example {
    spec_modes(OutOfRange::Zero, &[10, 50, 50, 0, 0, 0])
}

fn spec_mode_clamp() -> Example {
    spec_modes(OutOfRange::Clamp, &[10, 50, 50, 50, 10, 50])
}

#[test]
fn spec_mode_error_names_the_first_bad_index() {
    let e = spec_modes(OutOfRange::Error, &[0; 6]);
    let err = e.plan.apply(&e.input, &e.indices).unwrap_err();
    assert_eq!(
        err.to_string(),
        "index 5 at indices position [3] is out of range for axis 0 of size 5"
    );
    assert_eq!(e.plan.apply_reference(&e.input, &e.indices), Err(err));
}

fn spec_per_row() -> Example {
    Example {
        plan: multiaxis(&[1]),
        input: m23(),
        indices: i64s(&[1, 2], &[2, 0]),
        output: i32s(&[2, 2], &[2, 0, 12, 10]),
        listed: Listed::Nothing,
    }
}

fn spec_broadcast_only() -> Example {
    Example {
        plan: multiaxis(&[]),
        input: i32s(&[3, 1], &[1, 2, 3]),
        indices: i64s(&[1, 4], &[9, -9, 0, 100]),
        output: i32s(&[3, 4], &[1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]),
        listed: Listed::Nothing,
    }
}

fn spec_empty_axis(mode: OutOfRange) -> Example {
    Example {
        plan: multiaxis_mode(&[1], mode),
        input: i32s(&[2, 0], &[]),
        indices: i64s(&[2, 1], &[0, 5]),
        output: i32s(&[2, 1], &[0, 0]),
        listed: Listed::Nothing,
    }
}

fn spec_empty_axis_zero() -> Example {
    spec_empty_axis(OutOfRange::Zero)
}

#[test]
fn spec_empty_axis_error_and_clamp_fail() {
    for mode in [OutOfRange::Error, OutOfRange::Clamp] {
        let e = spec_empty_axis(mode);
        let err = e.plan.apply(&e.input, &e.indices).unwrap_err();
        assert_eq!(
            err.to_string(),
            "index 0 at indices position [0, 0] is out of range for axis 1 of size 0"
        );
        assert_eq!(e.plan.apply_reference(&e.input, &e.indices), Err(err));
    }
}

/// An empty output reads no index: the out-of-range values are never checked.
fn spec_empty_output() -> Example {
    Example {
        plan: multiaxis(&[1]),
        input: i32s(&[0, 3], &[]),
        indices: i64s(&[1, 2], &[7, 9]),
        output: i32s(&[0, 2], &[]),
        listed: Listed::Nothing,
    }
}

fn spec_rank_zero() -> Example {
    Example {
        plan: multiaxis(&[]),
        input: i32s(&[], &[42]),
        indices: i64s(&[], &[-7]),
        output: i32s(&[], &[42]),
        listed: Listed::Nothing,
    }
}

/// ONNX Gather, data [P, Q, R], indices [S, T], axis 1: input [P, Q, 1, R], indices
/// [1, S, T, 1]. P, Q, R, S, T = 2, 3, 2, 2, 2; input `100 p + 10 q + r`.
fn spec_onnx_gather() -> Example {
    Example {
        plan: onnx::gather(3, 2, 1).unwrap(),
        input: pqr(),
        indices: i64s(&[2, 2], &[2, 0, -2, 1]),
        output: i32_from_fn(&[2, 2, 2, 2], |c| {
            let q = [2, 0, 1, 1][c[1] * 2 + c[2]];
            (100 * c[0] + 10 * q + c[3]) as i32
        }),
        listed: Listed::Same(Steps {
            input: &[2, 3, 1, 2],
            indices: &[1, 2, 2, 1],
            gathered: &[2, 2, 2, 2],
            axes: &[1],
        }),
    }
}

/// GatherND point sampling: data [H, W], indices [N, 2] -> [N, 1], squeezed to [N].
fn spec_point_sampling() -> Example {
    Example {
        plan: onnx::gather_nd(2, 2, 2, 0).unwrap(),
        input: m23(),
        indices: i64s(&[3, 2], &[1, 2, 0, -1, 1, 0]),
        output: i32s(&[3], &[12, 2, 10]),
        listed: Listed::Same(Steps {
            input: &[2, 3],
            indices: &[3, 2],
            gathered: &[3, 1],
            axes: &[0, 1],
        }),
    }
}

examples! {
    spec_points_yx => spec_points_yx_example;
    spec_points_xy => spec_points_xy_example;
    spec_mode_zero => spec_mode_zero_example;
    spec_mode_clamp => spec_mode_clamp_example;
    spec_per_row => spec_per_row_example;
    spec_broadcast_only => spec_broadcast_only_example;
    spec_empty_axis_zero => spec_empty_axis_zero_example;
    spec_empty_output => spec_empty_output_example;
    spec_rank_zero => spec_rank_zero_example;
    spec_onnx_gather => spec_onnx_gather_example;
    spec_point_sampling => spec_point_sampling_example;
    api_example => spec_proposal_example;
}
