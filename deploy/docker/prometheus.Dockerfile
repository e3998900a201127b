# Prometheus from Debian's package (no image registry needed), for the compose stack. Any Prometheus ≥ 2.x
# image (prom/prometheus) works the same with deploy/observability/prometheus/.
FROM docker.io/library/debian:bookworm-slim
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o prometheus -g prometheus /prometheus
USER prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
