/**
 * A slow S3 for the benches: a TCP proxy in front of an endpoint that lets
 * at most `mbps` MiB/s through in each direction, shared by all connections
 * (one link to a far store, not a limit per socket).
 *
 * It runs in a child process, so that its buffers and CPU are not counted as
 * the measured process's: a remote store's memory is not ours. The proxy
 * itself buffers next to nothing: it reads from a socket only as fast as the
 * token bucket lets bytes out, so the sender meets TCP back-pressure, the
 * way it would on a slow link.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import net from 'node:net'
import { createInterface } from 'node:readline'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'

const MiB = 1024 * 1024
/** Idle credit a direction may spend at once: a short burst, as a link's queue allows. */
const BURST_MS = 20
/** Largest piece sent per reservation: keeps connections interleaved and the pacing smooth. */
const PIECE = 16 * 1024

export interface Throttle {
  /** http://127.0.0.1:<port>: the endpoint to give the S3 client. */
  endpoint: string
  mbps: number
  close(): Promise<void>
}

/** Starts the proxy in front of `upstream` (an http URL) and waits until it listens. */
export async function startThrottle(upstream: string, mbps: number): Promise<Throttle> {
  const url = new URL(upstream)
  const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port)
  const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), 'serve', url.hostname, String(port), String(mbps)], {
    stdio: ['pipe', 'pipe', 'inherit'],
  })
  const exited = once(child, 'exit')
  const lines = createInterface({ input: child.stdout })
  const ready = await Promise.race([
    (async () => {
      for await (const line of lines) if (line.startsWith('LISTENING ')) return Number(line.slice('LISTENING '.length))
      return undefined
    })(),
    exited.then(() => undefined),
  ])
  if (ready === undefined) throw new Error('the throttling proxy did not start')
  return {
    endpoint: `${url.protocol}//127.0.0.1:${ready}`,
    mbps,
    async close() {
      // Its stdin closing is the signal to stop (also when this process dies).
      child.stdin.end()
      await exited
    },
  }
}

/**
 * Paces bytes at a rate with virtual time: each reservation moves the time
 * at which the next byte may leave, and waits until its own bytes may. A
 * direction idle for a while gets at most BURST_MS of credit.
 */
class Bucket {
  readonly #bytesPerMs: number
  #next = 0

  constructor(bytesPerSecond: number) {
    this.#bytesPerMs = bytesPerSecond / 1000
  }

  async take(n: number): Promise<void> {
    const now = performance.now()
    const start = Math.max(this.#next, now - BURST_MS)
    this.#next = start + n / this.#bytesPerMs
    // The bytes leave when their slot begins.
    if (start > now) await sleep(start - now)
  }
}

/** Copies src to dst at the bucket's pace, reading on only once dst took the last piece. */
async function pump(src: net.Socket, dst: net.Socket, bucket: Bucket): Promise<void> {
  for await (const chunk of src as AsyncIterable<Buffer>) {
    for (let at = 0; at < chunk.byteLength; at += PIECE) {
      const piece = chunk.subarray(at, at + PIECE)
      await bucket.take(piece.byteLength)
      if (dst.destroyed) return
      if (!dst.write(piece)) await Promise.race([once(dst, 'drain'), once(dst, 'close')])
    }
  }
  dst.end()
}

function serve(host: string, port: number, mbps: number): void {
  const up = new Bucket(mbps * MiB)
  const down = new Bucket(mbps * MiB)
  const server = net.createServer((client) => {
    const server = net.connect({ host, port })
    const fail = (): void => {
      client.destroy()
      server.destroy()
    }
    client.on('error', fail)
    server.on('error', fail)
    client.setNoDelay(true)
    server.setNoDelay(true)
    pump(client, server, up).catch(fail)
    pump(server, client, down).catch(fail)
  })
  server.listen(0, '127.0.0.1', () => {
    process.stdout.write(`LISTENING ${(server.address() as net.AddressInfo).port}\n`)
  })
  process.stdin.resume()
  process.stdin.on('end', () => process.exit(0))
}

if (process.argv[2] === 'serve' && process.argv[1] === fileURLToPath(import.meta.url)) {
  const [host, port, mbps] = process.argv.slice(3)
  serve(host!, Number(port), Number(mbps))
}
