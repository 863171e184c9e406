//! The files in `examples/` that the README tells people to run are accepted by the binaries'
//! own loaders.

use std::path::{Path, PathBuf};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name)
}

#[test]
fn example_queues_load_into_the_webhook() {
    let queues = gpufair_webhook::queues::load_queues_file(&example("queues.yaml"))
        .expect("examples/queues.yaml loads");
    assert_eq!(queues.len(), 2);
}

#[test]
fn example_fake_gpus_and_config_load_into_the_device_plugin() {
    let text = std::fs::read_to_string(example("fake-gpus.yaml")).unwrap();
    gpufair_device_plugin::backend::fake::FakeBackend::parse(&text)
        .expect("examples/fake-gpus.yaml parses");
    let config = std::fs::read_to_string(example("device-plugin-config.yaml")).unwrap();
    gpufair_device_plugin::config::Config::parse(&config)
        .expect("examples/device-plugin-config.yaml parses");
}
