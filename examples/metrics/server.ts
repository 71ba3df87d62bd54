import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { PrometheusMetrics } from 'tidemark/prometheus'

export interface MetricsServer {
  /** `http://host:port/metrics` */
  url: string
  close(): Promise<void>
}

/** Serves `GET /metrics` (Prometheus's text format) over node:http; anything else is a 404. */
export async function serveMetrics(metrics: PrometheusMetrics, options: { port?: number; host?: string } = {}): Promise<MetricsServer> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || req.url?.split('?')[0] !== '/metrics') {
      res.writeHead(404).end()
      return
    }
    metrics.metrics().then((body) => {
      res.writeHead(200, { 'content-type': metrics.contentType }).end(body)
    }, (err: unknown) => {
      res.writeHead(500, { 'content-type': 'text/plain' }).end(String((err as Error)?.message ?? err))
    })
  })
  const host = options.host ?? '127.0.0.1'
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(options.port ?? 0, host, () => resolve())
  })
  const { port } = server.address() as AddressInfo
  return {
    url: `http://${host}:${port}/metrics`,
    close: () => new Promise<void>((resolve, reject) => {
      server.close((err) => (err === undefined ? resolve() : reject(err)))
      server.closeAllConnections()
    }),
  }
}
