# make test         everything, on in-process fakes (kfake, gofakes3): needs only Go
# make integration  the end-to-end tests, plus the Kafka source and sink tests;
#                   KAFKA_BROKERS=host:port to use a real broker
TESTFLAGS ?=

.PHONY: test integration

test:
	go test -race -count=1 $(TESTFLAGS) ./...

integration:
	go test -race -count=1 $(TESTFLAGS) ./integration/... ./source/... ./sink/...

# make compose-smoke  docker-compose.yml's services as processes, without
#                     Docker, against a real broker (scripts/kafka, or
#                     KAFKA_BROKERS of a fresh one); prints the verdict
.PHONY: compose-smoke
compose-smoke:
	scripts/compose-smoke
