# syntax=docker/dockerfile:1
# gpufair-device-plugin: the kubelet device plugin for whole, MIG and shared GPUs.
# Build from the repository root:
#   docker build -f docker/gpufair-device-plugin.Dockerfile -t ghcr.io/gpufair/gpufair-device-plugin:0.1.0 .
#
# NVML is not in this image. The plugin loads libnvidia-ml.so.1 at run time, and the NVIDIA
# container toolkit mounts the host driver's copy (matching the kernel module, which a copy
# baked into the image could not guarantee) into any container started with
# NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=utility, as the DaemonSet sets. On
# nodes where nvidia is not containerd's default runtime, add runtimeClassName: nvidia to the
# DaemonSet. Without NVML the plugin exits with a clear error; --fake-gpus runs it anywhere.
# The DaemonSet runs it as root because kubelet's device-plugin directory is root-only.
# Build stage: the toolchain the workspace declares (rust-version), and the committed lock file.
# Base images are pinned by digest: a tag alone can move. Change tag and digest together
# (`docker buildx imagetools inspect IMAGE:TAG` prints a tag's digest).
FROM docker.io/library/rust:1.89.0-bookworm@sha256:948f9b08a66e7fe01b03a98ef1c7568292e07ec2e4fe90d88c07bb14563c84ff AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p gpufair-device-plugin --bin gpufair-device-plugin \
    && install -D -m 0755 target/release/gpufair-device-plugin /out/gpufair-device-plugin

# Run stage: no shell, no package manager, glibc only (ring's assembly and the NVML loader need
# it, so not scratch). Runs as the image's non-root user; the binary writes nothing to its own
# filesystem, so the pod can mount it read-only (readOnlyRootFilesystem: true).
FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f AS run
COPY --from=build /out/gpufair-device-plugin /usr/local/bin/gpufair-device-plugin
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpufair-device-plugin"]
