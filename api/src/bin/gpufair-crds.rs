//! Writes gpufair's CRD manifests into each directory given (default: print them to stdout).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifests = gpufair_api::crds::crd_manifests()?;
    let dirs: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    if dirs.is_empty() {
        for (_, yaml) in manifests {
            print!("---\n{yaml}");
        }
        return Ok(());
    }
    for dir in dirs {
        std::fs::create_dir_all(&dir)?;
        for (file, yaml) in &manifests {
            let path = dir.join(file);
            std::fs::write(&path, yaml)?;
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}
