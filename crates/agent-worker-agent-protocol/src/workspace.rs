//! The artifact workspace: files at `<workspace>/<task_id>/<relative_path>/<file_name>`, and
//! nothing outside it.

use std::path::{Component, Path, PathBuf};

/// The workspace directory when none is given, as in the reference SDK.
pub const DEFAULT_WORKSPACE: &str = "./workspace";

/// A path that would leave the workspace, or is not a plain name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PathRejected(String);

/// The folder artifact files live under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// A workspace at `root` (made when the first file is written).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// Its folder.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where an artifact's file lives. Every part is checked: the task id and the file name must
    /// be plain names, and the relative path relative and free of `..`, so the answer is always
    /// inside the workspace.
    pub fn artifact_path(
        &self,
        task_id: &str,
        relative_path: Option<&str>,
        file_name: &str,
    ) -> Result<PathBuf, PathRejected> {
        let mut path = self.root.join(plain_name("task_id", task_id)?);
        if let Some(relative) = relative_path {
            path.push(relative_folder(relative)?);
        }
        path.push(plain_name("file name", file_name)?);
        Ok(path)
    }
}

/// The longest file or folder name, in bytes (most file systems' limit).
const MAX_SEGMENT_BYTES: usize = 255;
/// The longest `relative_path`, in bytes.
const MAX_RELATIVE_PATH_BYTES: usize = 1024;

/// A single path segment: not empty, not `.` or `..`, no separator, no NUL.
fn plain_name<'a>(what: &str, name: &'a str) -> Result<&'a str, PathRejected> {
    let plain = agent_worker_core::engine::attachments::plain_segment(name)
        .filter(|n| n.len() <= MAX_SEGMENT_BYTES && !n.contains(char::is_control));
    if plain.is_none() {
        return Err(PathRejected(format!(
            "{what} {name:?} must be a plain file name (no '/', '\\', '..', no control character, at most {MAX_SEGMENT_BYTES} bytes)"
        )));
    }
    Ok(name)
}

/// A relative folder: no root, no drive, no `..`, no NUL or backslash. `.` segments and a
/// trailing `/` are dropped.
pub(super) fn relative_folder(relative: &str) -> Result<PathBuf, PathRejected> {
    let reject = |why: &str| {
        Err(PathRejected(format!(
            "relative_path {relative:?} {why}; it must name a folder inside the task's workspace"
        )))
    };
    if relative.contains(['\0', '\\']) {
        return reject("holds a NUL or a backslash");
    }
    if relative.contains(char::is_control) {
        return reject("holds a control character");
    }
    if relative.len() > MAX_RELATIVE_PATH_BYTES {
        return Err(PathRejected(format!(
            "relative_path is {} bytes, over the limit of {MAX_RELATIVE_PATH_BYTES}",
            relative.len()
        )));
    }
    let mut folder = PathBuf::new();
    for component in Path::new(relative).components() {
        match component {
            Component::Normal(part) if part.len() > MAX_SEGMENT_BYTES => {
                return reject("has a folder name over 255 bytes");
            }
            Component::Normal(part) => folder.push(part),
            Component::CurDir => {}
            Component::ParentDir => return reject("has a '..' segment"),
            Component::RootDir | Component::Prefix(_) => return reject("is absolute"),
        }
    }
    Ok(folder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_land_under_the_task_folder() {
        let ws = Workspace::new("/ws");
        assert_eq!(
            ws.artifact_path("t1", Some("python/code/"), "main.py").unwrap(),
            PathBuf::from("/ws/t1/python/code/main.py")
        );
        assert_eq!(
            ws.artifact_path("t1", Some("./a/./b"), "x").unwrap(),
            PathBuf::from("/ws/t1/a/b/x")
        );
        assert_eq!(
            ws.artifact_path("t1", None, "x").unwrap(),
            PathBuf::from("/ws/t1/x")
        );
    }

    #[test]
    fn nothing_leaves_the_workspace() {
        let ws = Workspace::new("/ws");
        for relative in ["/etc", "../x", "a/../../x", "a/..", "a\\..\\x", "a\0b"] {
            let err = ws.artifact_path("t1", Some(relative), "f").unwrap_err();
            assert!(err.to_string().contains("relative_path"), "{relative}: {err}");
        }
        for name in ["", ".", "..", "a/b", "..\\x"] {
            assert!(ws.artifact_path("t1", None, name).is_err(), "file name {name:?}");
            assert!(ws.artifact_path(name, None, "f").is_err(), "task id {name:?}");
        }
    }
}
