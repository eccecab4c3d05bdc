//! The few onnxruntime C API calls the kernel makes, each wrapped so that a failing call becomes
//! an `Err(Status)` and nothing else in the crate touches raw statuses.

use std::ffi::{c_char, c_void, CString};
use std::ptr;

use multigather_kernel::DataType;
use ort_sys::{
    ONNXTensorElementDataType as E, OrtApi, OrtErrorCode, OrtKernelContext, OrtKernelInfo,
    OrtStatus, OrtStatusPtr, OrtTensorTypeAndShapeInfo, OrtValue,
};

/// An attribute as [`Api::attribute`] finds it: the forms `GatherMultiaxis` takes, or the name of
/// the type it has instead.
pub enum Found {
    Ints(Vec<i64>),
    String(Vec<u8>),
    Other(&'static str),
}

impl Found {
    /// The view the attribute parse shared with the interpreter takes.
    pub fn raw(&self) -> multigather_kernel::gather::RawAttr<'_> {
        use multigather_kernel::gather::RawAttr;
        match self {
            Found::Ints(v) => RawAttr::Ints(v),
            Found::String(s) => RawAttr::String(s),
            Found::Other(kind) => RawAttr::Other(kind),
        }
    }
}

/// An owned, non-null `OrtStatus*`: an error on its way back to onnxruntime.
pub struct Status(pub *mut OrtStatus);

/// Shorthand for the results of this module.
pub type Result<T> = std::result::Result<T, Status>;

/// The API table handed to the library, with the calls it makes.
#[derive(Clone, Copy)]
pub struct Api(pub &'static OrtApi);

// SAFETY: `OrtApi` is a table of function pointers that onnxruntime never changes; its functions
// are callable from any thread.
unsafe impl Send for Api {}
// SAFETY: as above.
unsafe impl Sync for Api {}

/// Turns a returned status into a `Result`.
fn check(s: OrtStatusPtr) -> Result<()> {
    if s.0.is_null() {
        Ok(())
    } else {
        Err(Status(s.0))
    }
}

impl Api {
    /// A new status with `message` (interior NUL bytes are dropped).
    pub(crate) fn error(self, message: &str) -> Status {
        let text = CString::new(message.replace('\0', "")).unwrap_or_default();
        // SAFETY: `text` is a valid C string; onnxruntime copies it.
        let s = unsafe { (self.0.CreateStatus)(OrtErrorCode::ORT_INVALID_ARGUMENT, text.as_ptr()) };
        Status(s.0)
    }

    /// The message of an error status, and the status released.
    pub(crate) fn message(self, status: Status) -> String {
        // SAFETY: `status` is a live status; the message is copied before the release.
        unsafe {
            let text = std::ffi::CStr::from_ptr((self.0.GetErrorMessage)(status.0))
                .to_string_lossy()
                .into_owned();
            (self.0.ReleaseStatus)(status.0);
            text
        }
    }

    /// A string queried with the API's two-call convention (size, then contents), up to its
    /// first NUL.
    fn string(self, get: impl Fn(*mut c_char, *mut usize) -> OrtStatusPtr) -> Result<String> {
        let mut buf = self.bytes(get)?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Every byte of a string queried with the API's two-call convention: the size counts a
    /// terminating NUL, which is dropped, and NUL bytes inside the string are kept.
    fn bytes(self, get: impl Fn(*mut c_char, *mut usize) -> OrtStatusPtr) -> Result<Vec<u8>> {
        let mut size = 0usize;
        check(get(ptr::null_mut(), &mut size))?;
        let mut buf = vec![0u8; size.max(1)];
        check(get(buf.as_mut_ptr().cast(), &mut size))?;
        buf.truncate(size.saturating_sub(1));
        Ok(buf)
    }

    /// The node's name.
    pub(crate) fn node_name(self, info: *const OrtKernelInfo) -> Result<String> {
        // SAFETY: `info` is the kernel info onnxruntime passed to `CreateKernelV2`.
        self.string(|out, size| unsafe { (self.0.KernelInfo_GetNodeName)(info, out, size) })
    }

    /// The name of the node's output `index`.
    pub(crate) fn output_name(self, info: *const OrtKernelInfo, index: usize) -> Result<String> {
        // SAFETY: as for `node_name`.
        self.string(|out, size| unsafe {
            (self.0.KernelInfo_GetOutputName)(info, index, out, size)
        })
    }

    /// The attribute `name` of the node as far as the C API shows its type, or `None` when the
    /// node does not have it. The API has a getter per type and no way to ask for the type, so
    /// the single-value getters (which check it) are tried first; an attribute that none of them
    /// nor the list getters read is an empty list (of ints as far as anyone can tell).
    pub(crate) fn attribute(self, info: *const OrtKernelInfo, name: &str) -> Option<Found> {
        let key = CString::new(name).ok()?;
        let key = key.as_ptr();
        // SAFETY (every call below): `info` is the kernel info onnxruntime passed to
        // `CreateKernelV2`, `key` a C string that outlives the calls, null output pointers ask
        // for sizes, and the buffers passed hold the sizes asked for.
        let mut ints = 0usize;
        let exists = unsafe {
            (self.0.KernelInfoGetAttributeArray_int64)(info, key, ptr::null_mut(), &mut ints)
        };
        if let Err(s) = check(exists) {
            self.message(s);
            return None;
        }
        let mut int = 0i64;
        if self.ok(unsafe { (self.0.KernelInfoGetAttribute_int64)(info, key, &mut int) }) {
            return Some(Found::Other("int"));
        }
        let mut float = 0f32;
        if self.ok(unsafe { (self.0.KernelInfoGetAttribute_float)(info, key, &mut float) }) {
            return Some(Found::Other("float"));
        }
        if let Ok(bytes) = self.bytes(|out, size| unsafe {
            (self.0.KernelInfoGetAttribute_string)(info, key, out, size)
        }) {
            return Some(Found::String(bytes));
        }
        let mut allocator = ptr::null_mut();
        if self.ok(unsafe { (self.0.GetAllocatorWithDefaultOptions)(&mut allocator) }) {
            let mut value = ptr::null_mut();
            let tensor =
                unsafe { (self.0.KernelInfoGetAttribute_tensor)(info, key, allocator, &mut value) };
            if self.ok(tensor) {
                if !value.is_null() {
                    unsafe { (self.0.ReleaseValue)(value) };
                }
                return Some(Found::Other("tensor"));
            }
        }
        let mut floats = 0usize;
        let read = unsafe {
            (self.0.KernelInfoGetAttributeArray_float)(info, key, ptr::null_mut(), &mut floats)
        };
        if self.ok(read) && floats > 0 {
            return Some(Found::Other("floats"));
        }
        // Sized by the model: allocated through the budgeted path.
        let Ok(mut values) = multigather_kernel::tensor::try_vec(ints, 0i64) else {
            return Some(Found::Other("an ints list too long to read"));
        };
        if ints > 0 {
            let read = unsafe {
                (self.0.KernelInfoGetAttributeArray_int64)(
                    info,
                    key,
                    values.as_mut_ptr(),
                    &mut ints,
                )
            };
            if !self.ok(read) {
                return Some(Found::Other("an unreadable attribute"));
            }
            values.truncate(ints);
        }
        Some(Found::Ints(values))
    }

    /// A returned status as a `Result`.
    pub(crate) fn check(self, s: OrtStatusPtr) -> Result<()> {
        check(s)
    }

    /// True for a successful call; a failure's status is released.
    pub(crate) fn ok(self, s: OrtStatusPtr) -> bool {
        match check(s) {
            Ok(()) => true,
            Err(s) => {
                self.message(s);
                false
            }
        }
    }

    /// Input `index` of the running node.
    pub(crate) fn input(self, ctx: *mut OrtKernelContext, index: usize) -> Result<*const OrtValue> {
        let mut value = ptr::null();
        // SAFETY: `ctx` is the context onnxruntime passed to `KernelComputeV2`.
        check(unsafe { (self.0.KernelContext_GetInput)(ctx, index, &mut value) })?;
        Ok(value)
    }

    /// Output `index` of the running node, allocated with `shape`.
    pub(crate) fn output(
        self,
        ctx: *mut OrtKernelContext,
        index: usize,
        shape: &[usize],
    ) -> Result<*mut OrtValue> {
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let mut value = ptr::null_mut();
        // SAFETY: as for `input`; `dims` holds `dims.len()` values.
        check(unsafe {
            (self.0.KernelContext_GetOutput)(ctx, index, dims.as_ptr(), dims.len(), &mut value)
        })?;
        Ok(value)
    }

    /// Element type code (`ONNXTensorElementDataType` as a number) and shape of a tensor.
    pub(crate) fn type_and_shape(self, value: *const OrtValue) -> Result<(i32, Vec<usize>)> {
        let mut info: *mut OrtTensorTypeAndShapeInfo = ptr::null_mut();
        // SAFETY: `value` is a live tensor value of the running node.
        check(unsafe { (self.0.GetTensorTypeAndShape)(value, &mut info) })?;
        let result = (|| {
            // The type is read into an i32: a code this crate does not know is not a valid
            // Rust enum value.
            let mut code = 0i32;
            let mut rank = 0usize;
            // SAFETY: `info` is live until released below; `code` has the enum's size (repr i32).
            unsafe {
                check((self.0.GetTensorElementType)(
                    info,
                    (&mut code as *mut i32).cast::<E>(),
                ))?;
                check((self.0.GetDimensionsCount)(info, &mut rank))?;
            }
            let mut dims = vec![0i64; rank];
            // SAFETY: `dims` holds `rank` values.
            check(unsafe { (self.0.GetDimensions)(info, dims.as_mut_ptr(), rank) })?;
            let dims = dims
                .into_iter()
                .map(|d| usize::try_from(d).map_err(|_| self.error(&format!("dimension {d}"))))
                .collect::<Result<Vec<_>>>()?;
            Ok((code, dims))
        })();
        // SAFETY: `info` was created above and is released once.
        unsafe { (self.0.ReleaseTensorTypeAndShapeInfo)(info) };
        result
    }

    /// The first byte of a tensor's elements (fixed-width and packed types).
    pub(crate) fn data(self, value: *const OrtValue) -> Result<*mut u8> {
        let mut data: *mut c_void = ptr::null_mut();
        // SAFETY: `value` is a live tensor; onnxruntime's own kernels read inputs the same way
        // (the pointer is only read through for inputs).
        check(unsafe { (self.0.GetTensorMutableData)(value.cast_mut(), &mut data) })?;
        Ok(data.cast())
    }

    /// The elements of a `string` tensor of `count` elements.
    pub(crate) fn strings(self, value: *const OrtValue, count: usize) -> Result<Vec<Vec<u8>>> {
        let mut total = 0usize;
        // SAFETY: `value` is a live string tensor.
        check(unsafe { (self.0.GetStringTensorDataLength)(value, &mut total) })?;
        let room = |e| self.error(&format!("string input: {e}"));
        let mut bytes = multigather_kernel::tensor::try_vec(total, 0u8).map_err(room)?;
        let mut offsets = multigather_kernel::tensor::try_vec(count, 0usize).map_err(room)?;
        // SAFETY: the buffers hold `total` bytes and `count` offsets.
        check(unsafe {
            (self.0.GetStringTensorContent)(
                value,
                bytes.as_mut_ptr().cast(),
                total,
                offsets.as_mut_ptr(),
                count,
            )
        })?;
        let mut strings = multigather_kernel::tensor::try_with_capacity(count).map_err(room)?;
        for (i, &start) in offsets.iter().enumerate() {
            let end = offsets.get(i + 1).copied().unwrap_or(total);
            let Some(s) = bytes.get(start..end) else {
                return Err(self.error("onnxruntime gave string offsets outside its buffer"));
            };
            strings.push(s.to_vec());
        }
        Ok(strings)
    }

    /// Fills a `string` output. onnxruntime takes C strings, so a string holding a NUL byte
    /// cannot be stored and is an error.
    pub(crate) fn fill_strings(self, value: *mut OrtValue, strings: &[Vec<u8>]) -> Result<()> {
        let owned = strings
            .iter()
            .map(|s| CString::new(s.as_slice()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| {
                self.error("a string element holds a NUL byte, which onnxruntime cannot store")
            })?;
        let pointers: Vec<*const c_char> = owned.iter().map(|s| s.as_ptr()).collect();
        // SAFETY: `pointers` holds `strings.len()` valid C strings, which onnxruntime copies.
        check(unsafe { (self.0.FillStringTensor)(value, pointers.as_ptr(), pointers.len()) })
    }

    /// Runs `task(k)` for `k` in `0..total` on the session's intra-op thread pool (serially
    /// on the calling thread when the session has one intra-op thread).
    pub(crate) fn parallel_for<F: Fn(usize) + Sync>(
        self,
        ctx: *mut OrtKernelContext,
        total: usize,
        task: &F,
    ) -> Result<()> {
        unsafe extern "C" fn trampoline<F: Fn(usize) + Sync>(data: *mut c_void, k: usize) {
            // SAFETY: `data` is the `&F` passed below, alive for the whole call.
            let task = unsafe { &*data.cast::<F>() };
            // A panic must not unwind into onnxruntime's threads.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task(k)));
        }
        // SAFETY: `task` outlives the call, which returns after every task ran.
        check(unsafe {
            (self.0.KernelContext_ParallelFor)(
                ctx,
                trampoline::<F>,
                total,
                0,
                (task as *const F).cast_mut().cast(),
            )
        })
    }
}

/// The element type for an `ONNXTensorElementDataType` code. onnxruntime numbers the element
/// types as ONNX's `TensorProto.DataType` does up to `FLOAT4E2M1` (23); the three after it come
/// in another order (`UINT2`, `INT2`, `FLOAT8E8M0` are 24, 25, 26 there, 25, 26, 24 in ONNX).
pub(crate) fn data_type(code: i32) -> Option<DataType> {
    const UINT2: i32 = E::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT2 as i32;
    const INT2: i32 = E::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT2 as i32;
    const FLOAT8E8M0: i32 = E::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E8M0 as i32;
    const SAME_AS_ONNX: i32 = E::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT4E2M1 as i32;
    match code {
        UINT2 => Some(DataType::Uint2),
        INT2 => Some(DataType::Int2),
        FLOAT8E8M0 => Some(DataType::Float8E8M0),
        ..=SAME_AS_ONNX => DataType::from_onnx(code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_type_code_of_onnxruntime_names_its_data_type() {
        let pairs = [
            (E::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, DataType::Float),
            (E::ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING, DataType::String),
            (
                E::ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16,
                DataType::Bfloat16,
            ),
            (
                E::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT4E2M1,
                DataType::Float4E2M1,
            ),
            (E::ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT2, DataType::Uint2),
            (E::ONNX_TENSOR_ELEMENT_DATA_TYPE_INT2, DataType::Int2),
            (
                E::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E8M0,
                DataType::Float8E8M0,
            ),
        ];
        for (code, dtype) in pairs {
            assert_eq!(data_type(code as i32), Some(dtype), "{code:?}");
        }
        assert_eq!(
            data_type(E::ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED as i32),
            None
        );
        // Every code onnxruntime defines names a type of its own.
        let last = E::ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT8E8M0 as i32;
        let mut seen = Vec::new();
        for code in 1..=last {
            let dtype = data_type(code).expect("a known code");
            assert!(!seen.contains(&dtype), "{code} repeats {dtype:?}");
            seen.push(dtype);
        }
    }
}
