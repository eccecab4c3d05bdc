//! An onnxruntime custom-op library for `multigather.GatherMultiaxis` (domain `multigather`,
//! version 1, `docs/gather-multiaxis.md`), running the multigather fast kernel.
//!
//! onnxruntime loads the shared library (`libmultigather_ort.so`) and calls its C entry point
//! [`RegisterCustomOps`]:
//!
//! ```python
//! import onnxruntime as ort
//! options = ort.SessionOptions()
//! options.register_custom_ops_library("target/release/libmultigather_ort.so")
//! session = ort.InferenceSession("model.rewritten.onnx", options)
//! ```
//!
//! (C and C++: `RegisterCustomOpsLibrary_V2`, or `RegisterCustomOps` called directly.)
//!
//! - **Types.** `input` takes every element type onnxruntime's custom-op API carries (all ONNX
//!   types but `float6e2m3` / `float6e3m2`, which onnxruntime has no element type for); the
//!   output has the input's type. `indices` are `int64` or `int32`: the operator is registered
//!   twice under the same name, once per index type, because onnxruntime infers a custom op's
//!   output type from exactly one input of undeclared type.
//! - **Attributes and errors** as the specification says, checked like the interpreter checks
//!   them and reported through `OrtStatus` with the interpreter's wording
//!   (`node 'NAME' (multigather.GatherMultiaxis): index 9 at indices position [0, 1] is out of
//!   range for axis 1 of size 4`).
//! - **Threads.** The kernel's parallel tasks (the same cut of the work as in the interpreter:
//!   output chunks, or column tiles of a staged gather) run on the session's intra-op thread
//!   pool (`KernelContext_ParallelFor`, through `multigather_kernel::par::Workers`). The library starts
//!   no thread of its own, so `intra_op_num_threads = 1` runs every gather on the calling thread.
//! - **Bindings.** `ort-sys` with `disable-linking`: nothing of onnxruntime is linked or
//!   downloaded at build time; the API table comes from the runtime that loads the library
//!   (API version 17, so onnxruntime 1.17 and later).

mod ffi;
mod infer;
mod kernel;

use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use multigather_kernel::gather::{DOMAIN, OP_TYPE};
use ort_sys::{
    ONNXTensorElementDataType as E, OrtApi, OrtApiBase, OrtCustomOp,
    OrtCustomOpInputOutputCharacteristic as Io, OrtKernelContext, OrtKernelInfo, OrtMemType,
    OrtSessionOptions, OrtShapeInferContext, OrtStatus, OrtStatusPtr, ORT_API_VERSION,
};

use crate::ffi::{Api, Status};
use crate::kernel::Kernel;

const OP_NAME: &[u8] = b"GatherMultiaxis\0";
const DOMAIN_NAME: &[u8] = b"multigather\0";

/// The operator with `int64` indices.
static OP_INT64: OrtCustomOp = op(index_type_int64);
/// The operator with `int32` indices.
static OP_INT32: OrtCustomOp = op(index_type_int32);

const fn op(index_type: unsafe extern "system" fn(*const OrtCustomOp, usize) -> E) -> OrtCustomOp {
    OrtCustomOp {
        version: ORT_API_VERSION,
        CreateKernel: None,
        GetName: Some(name),
        GetExecutionProviderType: Some(provider),
        GetInputType: Some(index_type),
        GetInputTypeCount: Some(two),
        GetOutputType: Some(undefined),
        GetOutputTypeCount: Some(one),
        KernelCompute: None,
        KernelDestroy: Some(destroy),
        GetInputCharacteristic: Some(required),
        GetOutputCharacteristic: Some(required),
        GetInputMemoryType: Some(default_memory),
        GetVariadicInputMinArity: Some(one_int),
        GetVariadicInputHomogeneity: Some(one_int),
        GetVariadicOutputMinArity: Some(one_int),
        GetVariadicOutputHomogeneity: Some(one_int),
        CreateKernelV2: Some(create),
        KernelComputeV2: Some(compute),
        InferOutputShapeFn: Some(infer_shape),
        GetStartVersion: Some(start_version),
        GetEndVersion: Some(end_version),
    }
}

unsafe extern "system" fn name(_: *const OrtCustomOp) -> *const c_char {
    OP_NAME.as_ptr().cast()
}

unsafe extern "system" fn provider(_: *const OrtCustomOp) -> *const c_char {
    // Null: the CPU execution provider.
    ptr::null()
}

unsafe extern "system" fn index_type_int64(_: *const OrtCustomOp, i: usize) -> E {
    if i == 1 {
        E::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64
    } else {
        E::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED
    }
}

unsafe extern "system" fn index_type_int32(_: *const OrtCustomOp, i: usize) -> E {
    if i == 1 {
        E::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32
    } else {
        E::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED
    }
}

unsafe extern "system" fn undefined(_: *const OrtCustomOp, _: usize) -> E {
    E::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED
}

unsafe extern "system" fn two(_: *const OrtCustomOp) -> usize {
    2
}

unsafe extern "system" fn one(_: *const OrtCustomOp) -> usize {
    1
}

unsafe extern "system" fn one_int(_: *const OrtCustomOp) -> c_int {
    1
}

unsafe extern "system" fn required(_: *const OrtCustomOp, _: usize) -> Io {
    Io::INPUT_OUTPUT_REQUIRED
}

unsafe extern "system" fn default_memory(_: *const OrtCustomOp, _: usize) -> OrtMemType {
    OrtMemType::OrtMemTypeDefault
}

unsafe extern "system" fn start_version(_: *const OrtCustomOp) -> c_int {
    multigather_kernel::gather::SINCE_VERSION as c_int
}

unsafe extern "system" fn end_version(_: *const OrtCustomOp) -> c_int {
    c_int::MAX
}

unsafe extern "system" fn create(
    _: *const OrtCustomOp,
    api: *const OrtApi,
    info: *const OrtKernelInfo,
    kernel: *mut *mut c_void,
) -> OrtStatusPtr {
    // SAFETY: onnxruntime passes its API table, which lives as long as the process.
    let Some(api) = (unsafe { api.as_ref() }) else {
        // No API table, so no way to report; onnxruntime never does this.
        return OrtStatusPtr(ptr::null_mut());
    };
    let api = Api(api);
    let made = std::panic::catch_unwind(|| Kernel::new(api, info));
    match made {
        Ok(Ok(k)) => {
            // SAFETY: `kernel` is onnxruntime's out-pointer.
            unsafe { *kernel = Box::into_raw(Box::new(k)).cast() };
            OrtStatusPtr(ptr::null_mut())
        }
        Ok(Err(Status(s))) => OrtStatusPtr(s),
        Err(_) => OrtStatusPtr(
            api.error("internal error creating the GatherMultiaxis kernel")
                .0,
        ),
    }
}

unsafe extern "system" fn compute(kernel: *mut c_void, ctx: *mut OrtKernelContext) -> OrtStatusPtr {
    // SAFETY: `kernel` is the box `create` made, alive until `destroy`.
    let kernel = unsafe { &*kernel.cast::<Kernel>() };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| kernel.compute(ctx))) {
        Ok(Ok(())) => OrtStatusPtr(ptr::null_mut()),
        Ok(Err(Status(s))) => OrtStatusPtr(s),
        Err(_) => OrtStatusPtr(kernel.internal_error().0),
    }
}

/// The API table of the onnxruntime that registered the operator: shape inference is not
/// handed one.
static API: std::sync::OnceLock<Api> = std::sync::OnceLock::new();

unsafe extern "system" fn infer_shape(
    _: *const OrtCustomOp,
    ctx: *mut OrtShapeInferContext,
) -> OrtStatusPtr {
    let Some(&api) = API.get() else {
        return OrtStatusPtr(ptr::null_mut());
    };
    match std::panic::catch_unwind(|| infer::infer(api, ctx)) {
        Ok(Ok(())) => OrtStatusPtr(ptr::null_mut()),
        Ok(Err(Status(s))) => OrtStatusPtr(s),
        Err(_) => OrtStatusPtr(
            api.error("internal error inferring GatherMultiaxis's shape")
                .0,
        ),
    }
}

unsafe extern "system" fn destroy(kernel: *mut c_void) {
    if !kernel.is_null() {
        // SAFETY: `kernel` is the box `create` made; onnxruntime destroys it once.
        drop(unsafe { Box::from_raw(kernel.cast::<Kernel>()) });
    }
}

/// Registers `multigather.GatherMultiaxis` with a session's options: the entry point
/// onnxruntime calls when it loads this library (`register_custom_ops_library`,
/// `RegisterCustomOpsLibrary_V2`).
///
/// Returns null on success, or an `OrtStatus` saying why not (an onnxruntime without API
/// version 17).
///
/// # Safety
/// `options` must be a live `OrtSessionOptions` and `api_base` onnxruntime's `OrtApiBase`.
#[no_mangle]
pub unsafe extern "C" fn RegisterCustomOps(
    options: *mut OrtSessionOptions,
    api_base: *const OrtApiBase,
) -> *mut OrtStatus {
    // SAFETY: forwarded to the caller.
    unsafe { register(options, api_base) }
}

/// What [`RegisterCustomOps`] does, for libraries that link this crate and export the entry
/// point themselves (the Python package's extension module).
///
/// # Safety
/// As for [`RegisterCustomOps`].
pub unsafe fn register(
    options: *mut OrtSessionOptions,
    api_base: *const OrtApiBase,
) -> *mut OrtStatus {
    // SAFETY: `api_base` is onnxruntime's, per the contract.
    let Some(base) = (unsafe { api_base.as_ref() }) else {
        return ptr::null_mut();
    };
    // SAFETY: `GetApi` returns null or a table that lives as long as the process.
    let Some(api) = (unsafe { (base.GetApi)(ORT_API_VERSION).as_ref() }) else {
        return ptr::null_mut();
    };
    let api = Api(api);
    API.get_or_init(|| api);
    let run = || -> Result<(), Status> {
        let mut domain = ptr::null_mut();
        // The domain and its ops must outlive every session using them; the ops are statics and
        // the domain (a few bytes per registration) is never released.
        // SAFETY: valid C strings and out-pointers; the ops are statics.
        unsafe {
            status((api.0.CreateCustomOpDomain)(
                DOMAIN_NAME.as_ptr().cast(),
                &mut domain,
            ))?;
            status((api.0.CustomOpDomain_Add)(domain, &OP_INT64))?;
            status((api.0.CustomOpDomain_Add)(domain, &OP_INT32))?;
            status((api.0.AddCustomOpDomain)(options, domain))
        }
    };
    debug_assert_eq!(DOMAIN_NAME, format!("{DOMAIN}\0").as_bytes());
    debug_assert_eq!(OP_NAME, format!("{OP_TYPE}\0").as_bytes());
    match run() {
        Ok(()) => ptr::null_mut(),
        Err(Status(s)) => s,
    }
}

fn status(s: OrtStatusPtr) -> Result<(), Status> {
    if s.0.is_null() {
        Ok(())
    } else {
        Err(Status(s.0))
    }
}
