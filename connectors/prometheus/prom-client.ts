/**
 * prom-client, an optional peer dependency: every value Tidemark takes from
 * it comes from here (types are imported from 'prom-client' directly). In an
 * app without prom-client, loading tidemark/prometheus then fails with
 * TIDEMARK_PROMETHEUS_CLIENT_MISSING, which says what to install, instead of
 * Node's bare module-not-found error (src/util/optional-peer.ts).
 * prom-client is CommonJS: require() gives the module an import would.
 */
import { createRequire } from 'node:module'
import type * as PromClient from 'prom-client'
import { requireOptionalPeer } from '../../src/util/index.js'

const promClient = requireOptionalPeer<typeof PromClient>(createRequire(import.meta.url), 'prom-client', 'TIDEMARK_PROMETHEUS_CLIENT_MISSING', 'tidemark/prometheus')

export const { Counter, Gauge, Histogram, Registry } = promClient
export type Registry = PromClient.Registry
