//! The result files rig writes, read back as typed views.
//!
//! In: `cases.jsonl` lines, `manifest.json`, `ab.json` and `gate.json` of
//! `rig run`, `rig ab` and `rig gate`, parsed as JSON. Out: serde views of
//! them for report.html and `rig compare`, each field named once here
//! instead of as a string at every read, so a renamed field is a compile
//! error in the readers, not a "—" on the page. Every view names the writer
//! type it mirrors (in `case`, `ab`, `gate`, `report`): a field renamed
//! there is renamed here, and the run test that checks the calibration
//! costs fails if a case line a real run writes leaves a view field
//! unread that it should have (the views serialize back to find them). Fields are optional, so a file of an older rig,
//! or a case that ran no such pass or family, reads as absent exactly
//! where the field is.

pub mod ab;
pub mod case;
pub mod gate;
pub mod manifest;
