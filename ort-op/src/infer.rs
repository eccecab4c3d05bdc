//! The operator's shape rule as onnxruntime's shape inference sees it, so that a rewritten
//! graph (and every subgraph in it: `Scan`, `Loop` and `If` bodies must type their outputs) has
//! the output types the original had.
//!
//! Dims are onnxruntime's: a size (`>= 0`), or `-1` with a symbolic name or none. The rule is
//! `gather_multiaxis_dims` of the interpreter's static inference: on `axes` the logical indices'
//! dim (the last indices dim divided by the coordinate size), elsewhere the broadcast of the
//! input's and the indices' dims. What the rule cannot tell stays unknown; attributes it cannot
//! read leave the output untyped, and the kernel's creation then names the problem.

use std::ffi::{c_void, CStr, CString};
use std::ptr;

use multigather_kernel::gather::GatherSpec;
use ort_sys::{
    ONNXTensorElementDataType as E, OrtOpAttr, OrtOpAttrType, OrtShapeInferContext,
    OrtTensorTypeAndShapeInfo,
};

use crate::ffi::{Api, Result};

/// One dim: a size, or unknown with a name (possibly empty).
#[derive(Clone, Debug, PartialEq)]
struct Dim {
    size: i64,
    name: CString,
}

impl Dim {
    fn unknown() -> Dim {
        Dim {
            size: -1,
            name: CString::default(),
        }
    }

    /// The two dims under broadcasting, as far as they are known (`1` gives way).
    fn broadcast(&self, other: &Dim) -> Dim {
        match (self.size, other.size) {
            (1, _) => other.clone(),
            (_, 1) => self.clone(),
            (a, b) if a >= 0 && (a == b || b < 0) => self.clone(),
            (a, b) if b >= 0 && a < 0 => other.clone(),
            (-1, -1) if self.name == other.name && !self.name.is_empty() => self.clone(),
            _ => Dim::unknown(),
        }
    }
}

/// Sets output 0's type from the inputs' types and the `axes` attribute.
pub fn infer(api: Api, ctx: *mut OrtShapeInferContext) -> Result<()> {
    let (elem, input) = input_type(api, ctx, 0)?;
    let (_, indices) = input_type(api, ctx, 1)?;
    let Some(axes) = axes(api, ctx) else {
        return Ok(());
    };
    let (Some(input), Some(indices)) = (input, indices) else {
        return set_output(api, ctx, elem, None);
    };
    let Ok(spec) = GatherSpec::normalized(&axes, Default::default(), input.len()) else {
        return Ok(());
    };
    if input.len() != indices.len() {
        return Ok(());
    }
    let coordinate = spec.coordinate_size() as i64;
    let mut logical = indices;
    if let Some(last) = logical.last_mut() {
        if last.size >= 0 {
            last.size /= coordinate;
        } else if coordinate > 1 {
            *last = Dim::unknown();
        }
    }
    let dims: Vec<Dim> = input
        .iter()
        .zip(&logical)
        .enumerate()
        .map(|(j, (x, l))| {
            if spec.axes.contains(&j) {
                l.clone()
            } else {
                x.broadcast(l)
            }
        })
        .collect();
    set_output(api, ctx, elem, Some(&dims))
}

/// The `axes` attribute, or `None` when it cannot be read as ints.
fn axes(api: Api, ctx: *mut OrtShapeInferContext) -> Option<Vec<i64>> {
    let key = c"axes";
    let mut attr: *const OrtOpAttr = ptr::null();
    // SAFETY: `ctx` is the context onnxruntime passed to the shape inference function.
    let found = unsafe { (api.0.ShapeInferContext_GetAttribute)(ctx, key.as_ptr(), &mut attr) };
    if !api.ok(found) || attr.is_null() {
        return None;
    }
    let mut bytes = 0usize;
    // SAFETY: `attr` is the live attribute; a zero-length read asks for the size.
    let sized = unsafe {
        (api.0.ReadOpAttr)(
            attr,
            OrtOpAttrType::ORT_OP_ATTR_INTS,
            ptr::null_mut(),
            0,
            &mut bytes,
        )
    };
    // A zero-length read of a non-empty list fails after telling the size; only the size is
    // wanted here.
    api.ok(sized);
    let count = bytes / std::mem::size_of::<i64>();
    // Sized by the model: allocated through the budgeted path (a list too long leaves the
    // output untyped, and the kernel's creation reports the attribute).
    let mut values = multigather_kernel::tensor::try_vec(count, 0i64).ok()?;
    if count == 0 {
        return Some(values);
    }
    // SAFETY: `values` holds `count` ints, `bytes` bytes.
    let read = unsafe {
        (api.0.ReadOpAttr)(
            attr,
            OrtOpAttrType::ORT_OP_ATTR_INTS,
            values.as_mut_ptr().cast::<c_void>(),
            bytes,
            &mut bytes,
        )
    };
    api.ok(read).then_some(values)
}

/// Input `index`'s element type code and dims (`None`: rank unknown).
fn input_type(
    api: Api,
    ctx: *mut OrtShapeInferContext,
    index: usize,
) -> Result<(i32, Option<Vec<Dim>>)> {
    let mut info: *mut OrtTensorTypeAndShapeInfo = ptr::null_mut();
    // SAFETY: `ctx` is live. The info it hands out is the context's own (onnxruntime keeps it
    // for the context's lifetime): it is read here and never released.
    api.check(unsafe { (api.0.ShapeInferContext_GetInputTypeShape)(ctx, index, &mut info) })?;
    if info.is_null() {
        return Ok((0, None));
    }
    (|| {
        let mut code = 0i32;
        let mut rank = 0usize;
        // SAFETY: `info` is live; `code` has the enum's size (repr i32).
        unsafe {
            api.check((api.0.GetTensorElementType)(
                info,
                (&mut code as *mut i32).cast::<E>(),
            ))?;
            api.check((api.0.GetDimensionsCount)(info, &mut rank))?;
        }
        let mut sizes = vec![0i64; rank];
        let mut names: Vec<*const std::ffi::c_char> = vec![ptr::null(); rank];
        // SAFETY: both buffers hold `rank` entries; the names live as long as `info`.
        unsafe {
            api.check((api.0.GetDimensions)(info, sizes.as_mut_ptr(), rank))?;
            api.check((api.0.GetSymbolicDimensions)(
                info,
                names.as_mut_ptr(),
                rank,
            ))?;
        }
        let dims = sizes
            .iter()
            .zip(&names)
            .map(|(&size, &name)| Dim {
                size: size.max(-1),
                name: if name.is_null() {
                    CString::default()
                } else {
                    // SAFETY: a non-null name is a C string owned by `info`.
                    unsafe { CStr::from_ptr(name) }.to_owned()
                },
            })
            .collect();
        Ok((code, Some(dims)))
    })()
}

/// Declares output 0 with element type `elem` and `dims`.
fn set_output(
    api: Api,
    ctx: *mut OrtShapeInferContext,
    elem: i32,
    dims: Option<&[Dim]>,
) -> Result<()> {
    // The codes of the element types the declarations know: anything newer stays untyped.
    const KNOWN: std::ops::RangeInclusive<i32> = 0..=26;
    let Some(dims) = dims.filter(|_| KNOWN.contains(&elem)) else {
        return Ok(());
    };
    let mut info: *mut OrtTensorTypeAndShapeInfo = ptr::null_mut();
    // SAFETY: `info` is created here and released below.
    api.check(unsafe { (api.0.CreateTensorTypeAndShapeInfo)(&mut info) })?;
    let set = (|| {
        let sizes: Vec<i64> = dims.iter().map(|d| d.size).collect();
        let mut names: Vec<*const std::ffi::c_char> =
            dims.iter().map(|d| d.name.as_ptr()).collect();
        // SAFETY: `info` is live; `elem` is one of the enum's values (`KNOWN`, its
        // discriminants, all of them); the buffers hold one entry per dim and outlive the
        // calls, which copy them.
        unsafe {
            api.check((api.0.SetTensorElementType)(
                info,
                std::mem::transmute::<i32, E>(elem),
            ))?;
            api.check((api.0.SetDimensions)(info, sizes.as_ptr(), sizes.len()))?;
            api.check((api.0.SetSymbolicDimensions)(
                info,
                names.as_mut_ptr(),
                names.len(),
            ))?;
            api.check((api.0.ShapeInferContext_SetOutputTypeShape)(ctx, 0, info))
        }
    })();
    // SAFETY: created above, released once.
    unsafe { (api.0.ReleaseTensorTypeAndShapeInfo)(info) };
    set
}
