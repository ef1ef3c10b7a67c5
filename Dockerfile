# The weir worker image: one static binary, cmd/processor.
#   docker build -t weir .
#   docker run weir run ...
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Pure Go (Pebble included), so the binary is static and runs on distroless.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/processor ./cmd/processor

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/processor /usr/local/bin/processor
# Local state (Pebble stores, checkpoint staging) lives here; it is a cache:
# everything durable is in Kafka and the checkpoint storage.
WORKDIR /var/lib/weir
ENTRYPOINT ["/usr/local/bin/processor"]
CMD ["run"]
