# syntax=docker/dockerfile:1
# gpufair-webhook (crate gpufair-runtime): the admission webhook, and the gate-release controller
# on the elected leader.
# Build from the repository root:
#   docker build -f docker/gpufair-webhook.Dockerfile -t ghcr.io/gpufair/gpufair-webhook:0.1.0 .

# Build stage: the toolchain the workspace declares (rust-version), and the committed lock file.
# Base images are pinned by digest: a tag alone can move. Change tag and digest together
# (`docker buildx imagetools inspect IMAGE:TAG` prints a tag's digest).
FROM docker.io/library/rust:1.89.0-bookworm@sha256:948f9b08a66e7fe01b03a98ef1c7568292e07ec2e4fe90d88c07bb14563c84ff AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p gpufair-runtime --bin gpufair-webhook \
    && install -D -m 0755 target/release/gpufair-webhook /out/gpufair-webhook

# Run stage: no shell, no package manager, glibc only (ring's assembly and the NVML loader need
# it, so not scratch). Runs as the image's non-root user; the binary writes nothing to its own
# filesystem, so the pod can mount it read-only (readOnlyRootFilesystem: true).
FROM gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f AS run
COPY --from=build /out/gpufair-webhook /usr/local/bin/gpufair-webhook
USER 65532:65532
# The controller rebuilds its snapshot every few seconds. mimalloc's default hands freed pages
# back to the kernel after 1 s, so each cycle faulted its memory in again: about 20 ms more per
# cycle with 200,000 pods waiting (BENCHMARKS.md, "Four times the size"). 30 s keeps the pages
# from one cycle to the next and still returns them after a quiet spell.
ENV MIMALLOC_PURGE_DELAY=30000
ENTRYPOINT ["/usr/local/bin/gpufair-webhook"]
