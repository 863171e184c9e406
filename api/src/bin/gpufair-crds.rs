//! Writes gpufair's CRD manifests into a directory (default: print them to stdout).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifests = gpufair_api::crds::crd_manifests()?;
    match std::env::args_os().nth(1).map(PathBuf::from) {
        Some(dir) => {
            std::fs::create_dir_all(&dir)?;
            for (file, yaml) in manifests {
                let path = dir.join(file);
                std::fs::write(&path, yaml)?;
                println!("wrote {}", path.display());
            }
        }
        None => {
            for (_, yaml) in manifests {
                print!("---\n{yaml}");
            }
        }
    }
    Ok(())
}
