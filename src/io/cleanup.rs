//! The temporary files a save is writing, registered so that a process ending abruptly can still
//! remove them.
//!
//! A save writes into temporary files beside its outputs and renames them into place (see
//! `save_with`); an error drops them, which deletes them. The one way out that runs no destructor
//! is the binary's `SIGBUS` handler (a mapped input truncated by another process while it is
//! read): it calls [`remove_temporary_files`], which unlinks every file registered here, so no
//! stray `.multigather-*.tmp` is left in the user's directory.
//!
//! Design note: the handler may only call async-signal-safe functions, so the paths are kept as
//! C strings in a fixed array of atomic pointers, written when a file is created and cleared when
//! it is renamed into place or deleted; the handler only loads pointers and calls `unlink(2)`.

use std::ffi::{c_char, CStr, CString};
use std::path::Path;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

/// How many temporary files may be registered at once (a save has at most three: the model, the
/// external data, and the previous data file kept for putting back).
const SLOTS: usize = 16;

static PATHS: [AtomicPtr<c_char>; SLOTS] = [const { AtomicPtr::new(null_mut()) }; SLOTS];

/// A registered temporary file; dropping it forgets the file (drop it once the file is renamed
/// or deleted).
#[derive(Debug)]
pub(super) struct Registration(Option<usize>);

/// Registers the temporary file at `path` for [`remove_temporary_files`].
pub(super) fn register(path: &Path) -> Registration {
    let Some(c) = c_path(path) else {
        return Registration(None);
    };
    let raw = c.into_raw();
    for (i, slot) in PATHS.iter().enumerate() {
        let free = slot.compare_exchange(null_mut(), raw, Ordering::AcqRel, Ordering::Acquire);
        if free.is_ok() {
            return Registration(Some(i));
        }
    }
    // SAFETY: `raw` came from `CString::into_raw` above and was stored nowhere.
    drop(unsafe { CString::from_raw(raw) });
    Registration(None)
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            let raw = PATHS[i].swap(null_mut(), Ordering::AcqRel);
            if !raw.is_null() {
                // SAFETY: only `register` stores pointers, from `CString::into_raw`, and the swap
                // took this one out of the array, so it is freed once.
                drop(unsafe { CString::from_raw(raw) });
            }
        }
    }
}

#[cfg(unix)]
fn c_path(path: &Path) -> Option<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(path.as_os_str().as_bytes()).ok()
}

#[cfg(not(unix))]
fn c_path(path: &Path) -> Option<CString> {
    CString::new(path.to_str()?).ok()
}

/// Removes every temporary file a save is writing. Async-signal-safe: it only reads the
/// registered paths and unlinks them, so a signal handler may call it before `_exit`.
///
/// # Example
/// ```
/// // With no save under way there is nothing to remove.
/// multigather::io::remove_temporary_files();
/// ```
pub fn remove_temporary_files() {
    remove_where(|_| true);
}

/// Unlinks the registered files whose path `select` accepts (reading and comparing bytes only,
/// so a handler may call it).
fn remove_where(select: impl Fn(&CStr) -> bool) {
    for slot in &PATHS {
        let raw = slot.load(Ordering::Acquire);
        if raw.is_null() {
            continue;
        }
        // SAFETY: a registered pointer is a NUL-terminated path owned by the array until its
        // registration is dropped.
        let path = unsafe { CStr::from_ptr(raw) };
        if select(path) {
            #[cfg(unix)]
            // SAFETY: `raw` is a NUL-terminated path (above); unlink(2) only reads it.
            unsafe {
                libc::unlink(raw);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_files_are_removed_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.tmp"), dir.path().join("b.tmp"));
        std::fs::write(&a, b"a").unwrap();
        std::fs::write(&b, b"b").unwrap();
        let ra = register(&a);
        let rb = register(&b);
        drop(rb);
        // Only this test's files: other tests of this binary may be saving at the same time.
        let prefix = c_path(dir.path()).unwrap();
        remove_where(|p| p.to_bytes().starts_with(prefix.to_bytes()));
        assert!(!a.exists());
        assert!(b.exists(), "a dropped registration forgets its file");
        drop(ra);
    }
}
