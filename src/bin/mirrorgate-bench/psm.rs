//! `mirrorgate-bench psm`: filled in by the PSM work.

pub fn run(_quick: bool) -> Result<serde_json::Value, String> {
    Err("the psm benchmark is not built yet".into())
}
