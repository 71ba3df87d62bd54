// tidemark/prometheus: Tidemark's metrics channels as Prometheus series, on prom-client (an optional peer dependency).
// The declarations use Node's types (Buffer, node:stream, ...): this pulls
// @types/node into an app's program even when its tsconfig lists no "types"
// (TypeScript 7's default).
/// <reference types="node" preserve="true" />
export { createPrometheusMetrics, PrometheusMetrics, PROMETHEUS_DEFAULTS } from './prometheus-metrics.js'
export type { PrometheusMetricsOptions } from './prometheus-metrics.js'
