# syntax=docker/dockerfile:1
# gpufair-certs: makes the webhook's CA and serving certificate, and (apply) keeps them in the cluster.
# Build from the repository root:
#   docker build -f docker/gpufair-certs.Dockerfile -t ghcr.io/gpufair/gpufair-certs:0.1.0 .

# Build stage: the toolchain the workspace declares (rust-version), and the committed lock file.
# Base images are pinned by digest: a tag alone can move. Change tag and digest together
# (`docker buildx imagetools inspect IMAGE:TAG` prints a tag's digest).
FROM docker.io/library/rust:1.89.0-bookworm@sha256:948f9b08a66e7fe01b03a98ef1c7568292e07ec2e4fe90d88c07bb14563c84ff AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p gpufair-certs --bin gpufair-certs \
    && install -D -m 0755 target/release/gpufair-certs /out/gpufair-certs

# Run stage: no shell, no package manager, glibc only (ring's assembly and the NVML loader need
# it, so not scratch). Runs as the image's non-root user; the binary writes nothing to its own
# filesystem, so the pod can mount it read-only (readOnlyRootFilesystem: true).
FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f AS run
COPY --from=build /out/gpufair-certs /usr/local/bin/gpufair-certs
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/gpufair-certs"]
