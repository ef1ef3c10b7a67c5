# weir worker images: one static binary on a distroless base, run as nonroot.
#
#   docker build -t weir .
#       the processor (cmd/processor): `run` (the default command) is a worker
#       of the count or balance example job, configured from WEIR_* variables;
#       also generate, verify, checkpoints and probe.
#
#   docker build --target job --build-arg JOB_MAIN=./examples/balance/cmd/balance -t weir-balance .
#       a job's own main (one that calls worker.Main), built the same way. For
#       a job in a module of your own, copy this file into that module and
#       name your main's package in JOB_MAIN. Its default command is `run`
#       too, and `probe URL` serves healthchecks (the image has no curl).
#
# Pure Go (Pebble included), so CGO_ENABLED=0 gives a static binary. Needs
# BuildKit (the default builder since Docker 23), which builds only the
# stages the target needs.

FROM golang:1.26 AS source
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .

# The state directory, owned by the image's user (distroless nonroot, uid
# 65532): WORKDIR alone would create it owned by root.
RUN mkdir -p /out/state

FROM source AS build-job
ARG JOB_MAIN
RUN test -n "$JOB_MAIN" || { echo "--target job needs --build-arg JOB_MAIN=./path/to/your/main" >&2; exit 1; }
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/job "$JOB_MAIN"

FROM source AS build
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/processor ./cmd/processor

# Local state (Pebble stores, checkpoint staging) lives in /var/lib/weir;
# it is a cache: everything durable is in Kafka and the checkpoint storage.
# Mount a volume there to keep it across container restarts (a restore then
# reuses the files still there instead of downloading them).
FROM gcr.io/distroless/static-debian12:nonroot AS job
COPY --from=source --chown=65532:65532 /out/state /var/lib/weir
COPY --from=build-job /out/job /usr/local/bin/job
ENV WEIR_STATE_DIR=/var/lib/weir
WORKDIR /var/lib/weir
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/job"]
CMD ["run"]

# The default target: last in the file.
FROM gcr.io/distroless/static-debian12:nonroot AS processor
COPY --from=source --chown=65532:65532 /out/state /var/lib/weir
COPY --from=build /out/processor /usr/local/bin/processor
ENV WEIR_STATE_DIR=/var/lib/weir
WORKDIR /var/lib/weir
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/processor"]
CMD ["run"]
