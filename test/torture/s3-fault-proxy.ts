// A small HTTP proxy in front of the test S3 server (radosgw) on 127.0.0.1
// that injects the faults an S3 client meets in production: 503 SlowDown,
// connections reset before an answer, bodies cut short, and stalls longer
// than the client's timeout. A `decide` function picks the fault of each
// request (seeded by the caller), so that a failing run can be replayed.
// The client signs its requests for the proxy's host; the proxy forwards the
// Host header unchanged, which radosgw accepts.
import http from 'node:http'
import type { AddressInfo, Socket } from 'node:net'

export type Fault = 'none' | 'slowdown' | 'reset' | 'truncate' | 'stall'

export interface ProxyRequest {
  method: string
  url: string
  /** Requests seen so far, this one included. */
  n: number
}

export interface FaultProxy {
  endpoint: string
  /** Faults injected so far, by kind. */
  readonly injected: Record<Exclude<Fault, 'none'>, number>
  /** Replaces the decision function (e.g. `() => 'none'` to let everything through). */
  setDecide(decide: (request: ProxyRequest) => Fault): void
  close(): Promise<void>
}

const SLOW_DOWN = '<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>torture</RequestId></Error>'

export async function startFaultProxy(upstream: string, options: { stallMs: number; decide?: (request: ProxyRequest) => Fault }): Promise<FaultProxy> {
  const target = new URL(upstream)
  let decide = options.decide ?? (() => 'none' as const)
  const injected = { slowdown: 0, reset: 0, truncate: 0, stall: 0 }
  let n = 0
  const sockets = new Set<Socket>()
  const timers = new Set<NodeJS.Timeout>()

  const server = http.createServer((req, res) => {
    const fault = decide({ method: req.method ?? 'GET', url: req.url ?? '/', n: ++n })
    if (fault === 'slowdown') {
      injected.slowdown++
      req.resume()
      res.writeHead(503, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(SLOW_DOWN) })
      res.end(SLOW_DOWN)
      return
    }
    if (fault === 'reset') {
      injected.reset++
      // Read a little of the request first, as a server that dies mid-request does.
      req.once('data', () => req.socket.resetAndDestroy())
      req.once('end', () => req.socket.resetAndDestroy())
      req.resume()
      return
    }
    if (fault === 'stall') {
      injected.stall++
      req.resume()
      // Longer than the client's idle timeout: it must give up and retry.
      const timer = setTimeout(() => {
        timers.delete(timer)
        req.socket.destroy()
      }, options.stallMs)
      timers.add(timer)
      return
    }
    const upstreamReq = http.request({
      host: target.hostname,
      port: target.port,
      method: req.method,
      path: req.url,
      headers: req.headers,
    }, (upstreamRes) => {
      const length = Number(upstreamRes.headers['content-length'] ?? NaN)
      if (fault === 'truncate' && req.method !== 'HEAD' && Number.isFinite(length) && length > 1) {
        injected.truncate++
        // The promised length, half of the bytes, then a closed connection.
        res.writeHead(upstreamRes.statusCode ?? 502, upstreamRes.headers)
        let sent = 0
        const cut = Math.floor(length / 2)
        upstreamRes.on('data', (chunk: Buffer) => {
          if (sent >= cut) return
          const part = chunk.subarray(0, cut - sent)
          sent += part.length
          res.write(part)
          if (sent >= cut) {
            upstreamRes.destroy()
            res.socket?.destroy()
          }
        })
        return
      }
      res.writeHead(upstreamRes.statusCode ?? 502, upstreamRes.headers)
      upstreamRes.pipe(res)
    })
    upstreamReq.on('error', () => res.socket?.destroy())
    req.pipe(upstreamReq)
  })
  server.on('connection', (socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    endpoint: `http://127.0.0.1:${port}`,
    injected,
    setDecide(next) {
      decide = next
    },
    async close() {
      for (const timer of timers) clearTimeout(timer)
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}
