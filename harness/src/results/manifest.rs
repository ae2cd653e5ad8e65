//! A `manifest.json` read back: what `rig compare` and report.html read of
//! it, as a typed view.
//!
//! In: the manifest of `rig run` (`run::Manifest`, its `targets[]`), `rig
//! ab` (its `arms[]`) or `rig gate` (`binary`, and `targets[]` once a
//! launch ran), parsed as JSON. Out: a [`ManifestView`] borrowing its
//! strings from it. Every field is optional: what a command does not
//! write, or an older rig did not, is absent.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::case::Object;

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct ManifestView<'a> {
    /// What every manifest starts with (`report::output`).
    pub rig_version: Value,
    pub started_unix_s: Value,
    #[serde(borrow)]
    pub argv: Option<Vec<&'a str>>,
    pub host: Value,
    /// `rig run`, `rig gate`: each target and its first launch's objects.
    #[serde(borrow)]
    pub targets: Vec<Target<'a>>,
    /// `rig ab`: each arm and the objects that make it that arm.
    #[serde(borrow)]
    pub arms: Vec<Arm<'a>>,
    /// `rig gate`: the binary measured, as a path (an older rig) or as a
    /// `launch::BinaryId`.
    #[serde(borrow)]
    pub binary: Option<Binary<'a>>,
}

impl<'a> ManifestView<'a> {
    /// The view of `v`; a manifest of another shape reads as empty, as an
    /// absent one does (a comparison then names no executable or commit).
    pub fn of(v: &'a Value) -> ManifestView<'a> {
        ManifestView::deserialize(v).unwrap_or_default()
    }

    pub fn target(&self, name: &str) -> Option<&Target<'a>> {
        self.targets.iter().find(|t| t.name == Some(name))
    }

    pub fn arm(&self, name: &str) -> Option<&Arm<'a>> {
        self.arms.iter().find(|a| a.name == Some(name))
    }

    /// The path of `binary`.
    pub fn binary_path(&self) -> Option<&'a str> {
        match self.binary.as_ref()? {
            Binary::Path(p) => Some(p),
            Binary::Id { path } => *path,
        }
    }
}

/// `run::TargetManifest`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Target<'a> {
    #[serde(borrow)]
    pub name: Option<&'a str>,
    /// The executable first, then every object it mapped.
    #[serde(borrow)]
    pub objects: Vec<Object<'a>>,
    /// `gitfacts::GitFacts`, or `null`.
    pub git: Value,
}

/// An arm of `rig ab`'s manifest.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Arm<'a> {
    #[serde(borrow)]
    pub name: Option<&'a str>,
    #[serde(borrow)]
    pub expected_objects: Vec<Expected<'a>>,
    /// `gitfacts::GitFacts` of the arm's binary, or `null`.
    pub git: Value,
}

/// `launch::identity::Expected`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(default)]
pub struct Expected<'a> {
    #[serde(borrow)]
    pub path: Option<&'a str>,
    #[serde(borrow)]
    pub sha256: Option<&'a str>,
    /// `binary`, `LD_LIBRARY_PATH` or `LD_PRELOAD`.
    #[serde(borrow)]
    pub via: Option<&'a str>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Binary<'a> {
    Path(&'a str),
    Id {
        #[serde(borrow)]
        path: Option<&'a str>,
    },
}
