// tidemark/prometheus: Tidemark's metrics channels as Prometheus series, on prom-client (an optional peer dependency).
export { createPrometheusMetrics, PrometheusMetrics, PROMETHEUS_DEFAULTS } from './prometheus-metrics.js'
export type { PrometheusMetricsOptions } from './prometheus-metrics.js'
