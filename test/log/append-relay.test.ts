// The file log's `relay` option (src/log/append-relay.ts): processes append
// through the holder of the append lock. Real processes, real files; the
// holder is killed with SIGKILL or closed while others relay to it.
import { describe, expect, it } from 'vitest'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { createConnection } from 'node:net'
import { NotRelayed, RelayClient, relayName, RelayServer } from '../../src/log/append-relay.js'
import { openFileLog, type FileLogOptions, type LogEntry } from '../../src/log/index.js'
import { tempDir } from '../helpers/tmp.js'
import { spawnScript, type Child } from './child.js'

const RELAY: FileLogOptions = { relay: true, lockTimeoutMs: 30_000 }

function writer(dir: string, tag: string, writers: number, count: number, options: FileLogOptions = RELAY, mode = 'plain'): Child {
  return spawnScript('test/log/fixtures/relay-append-loop.ts', [dir, tag, String(writers), JSON.stringify(options), String(count), mode])
}

async function readAll(dir: string): Promise<LogEntry[]> {
  const log = await openFileLog(dir, { readOnly: true })
  const out: LogEntry[] = []
  for await (const e of log.read(0n)) out.push(e)
  await log.close()
  return out
}

/** What a writer printed: acknowledged payloads with their revisions, failures with their code and retriable flag, and its relay counts. */
function outcome(child: Child): { acked: Map<string, bigint>; failed: Array<{ text: string; code: string; retriable: string }>; sent: number; served: number } {
  const acked = new Map<string, bigint>()
  const failed: Array<{ text: string; code: string; retriable: string }> = []
  let sent = -1
  let served = -1
  for (const line of child.lines) {
    const parts = line.split(' ')
    if (parts[0] === 'fail') failed.push({ text: parts[1]!, code: parts[2]!, retriable: parts[3]! })
    else if (parts[0] === 'closed') [sent, served] = [Number(parts[1]), Number(parts[2])]
    else if (parts.length === 2 && parts[0] !== 'lost') acked.set(parts[0]!, BigInt(parts[1]!))
  }
  return { acked, failed, sent, served }
}

/** Every acknowledged payload is in the log at its revision. */
function expectAckedStored(entries: readonly LogEntry[], acked: ReadonlyMap<string, bigint>): void {
  const stored = new Map(entries.map((e) => [Buffer.from(e.data).toString(), e.revision]))
  for (const [text, revision] of acked) expect(stored.get(text), text).toBe(revision)
}

describe.runIf(process.platform === 'linux')('file log: relay', () => {
  it('processes with relay: true append through the holder: one contiguous log, each writer in its order, frames relayed', async () => {
    const dir = tempDir()
    const children = ['a', 'b', 'c'].map((tag) => writer(dir, tag, 2, 150))
    await Promise.all(children.map((c) => c.waitFor((l) => l === 'ready')))
    for (const c of children) c.send('go')
    await Promise.all(children.map((c) => c.waitFor((l) => l.startsWith('closed '))))
    const results = children.map(outcome)
    const entries = await readAll(dir)
    expect(entries.map((e) => e.revision)).toEqual(entries.map((_, i) => BigInt(i)))
    expect(entries).toHaveLength(900)
    for (const r of results) {
      expect(r.failed).toEqual([])
      expect(r.acked.size).toBe(300)
      expectAckedStored(entries, r.acked)
    }
    // Each writer's appends are in the log in the order it made them.
    const last = new Map<string, number>()
    for (const e of entries) {
      const [tag, w, n] = Buffer.from(e.data).toString().split(':')
      const key = `${tag}:${w}`
      expect(Number(n), key).toBe((last.get(key) ?? -1) + 1)
      last.set(key, Number(n))
    }
    // The relay took place: processes sent frames and others served them
    // (all but those a closing holder handed back without reading them).
    const served = results.reduce((s, r) => s + r.served, 0)
    expect(served).toBeGreaterThan(0)
    expect(served).toBeLessThanOrEqual(results.reduce((s, r) => s + r.sent, 0))
  })

  it('without relay nothing is relayed, and a process with other options does not relay to the holder', async () => {
    const dir = tempDir()
    const children = [writer(dir, 'a', 2, 50, { lockTimeoutMs: 30_000 }), writer(dir, 'b', 2, 50, { lockTimeoutMs: 30_000 }), writer(dir, 'c', 2, 50, { ...RELAY, sync: false })]
    await Promise.all(children.map((c) => c.waitFor((l) => l === 'ready')))
    for (const c of children) c.send('go')
    await Promise.all(children.map((c) => c.waitFor((l) => l.startsWith('closed '))))
    const results = children.map(outcome)
    for (const r of results) expect([r.failed, r.sent, r.served]).toEqual([[], 0, 0])
    expect(await readAll(dir)).toHaveLength(300)
  })

  it('conditional appends relayed to the holder are judged against the tail exactly', async () => {
    const dir = tempDir()
    const children = ['a', 'b', 'c'].map((tag) => writer(dir, tag, 2, 60, RELAY, 'conditional'))
    await Promise.all(children.map((c) => c.waitFor((l) => l === 'ready')))
    for (const c of children) c.send('go')
    await Promise.all(children.map((c) => c.waitFor((l) => l.startsWith('closed '))))
    const results = children.map(outcome)
    const entries = await readAll(dir)
    // Each entry took effect only on the tail it was based on.
    for (const e of entries) expect(Buffer.from(e.data).toString().split(':')[3], String(e.revision)).toBe(String(e.revision))
    for (const r of results) {
      expect(r.failed).toEqual([])
      expectAckedStored(entries, r.acked)
    }
    expect(entries.length).toBe(results.reduce((s, r) => s + r.acked.size, 0))
    expect(children.flatMap((c) => c.lines).some((l) => l.startsWith('lost '))).toBe(true)
    expect(results.reduce((s, r) => s + r.sent, 0)).toBeGreaterThan(0)
  })

  it('a process killed with SIGKILL while relaying: nothing acknowledged is lost, relayed appends it did not answer fail as in doubt (retriable), the other goes on', async () => {
    const dir = tempDir()
    const holder = writer(dir, 'h', 2, -1)
    await holder.waitFor((l) => l === 'ready')
    holder.send('go')
    // The holder appends without pause, so it keeps the lock.
    await holder.waitFor((l) => l.startsWith('h:') && Number(l.split(' ')[1]) > 100)
    const client = writer(dir, 'c', 4, 400)
    await client.waitFor((l) => l === 'ready')
    client.send('go')
    await client.waitFor((l) => l.startsWith('c:'))
    holder.proc.kill('SIGKILL')
    await holder.exited
    await client.waitFor((l) => l.startsWith('closed '))
    const h = outcome(holder)
    const c = outcome(client)
    // The two relayed: mostly the client to the holder, which held the lock
    // first; but the lock can change hands between two of its groups (then
    // the killed one relayed to the client, which served it).
    expect(c.sent + c.served).toBeGreaterThan(0)
    expect(c.acked.size + c.failed.length).toBe(1600)
    expect(c.acked.size).toBeGreaterThan(1000)
    for (const f of c.failed) expect(f, f.text).toMatchObject({ code: 'TIDEMARK_LOG_UNAVAILABLE', retriable: 'true' })
    const entries = await readAll(dir)
    expect(entries.map((e) => e.revision)).toEqual(entries.map((_, i) => BigInt(i)))
    expectAckedStored(entries, h.acked)
    expectAckedStored(entries, c.acked)
  })

  it('a holder that closes tells its clients which appends it did not take: they append them themselves, none fails or is lost; and one that relayed closes cleanly too', async () => {
    const dir = tempDir()
    // The client appends for longer than the holder: it relays while the holder runs, and goes on alone after it closed.
    const holder = writer(dir, 'h', 2, 300)
    const client = writer(dir, 'c', 4, 600)
    await Promise.all([holder, client].map((c) => c.waitFor((l) => l === 'ready')))
    holder.send('go')
    await holder.waitFor((l) => l.startsWith('h:'))
    client.send('go')
    await Promise.all([holder, client].map((c) => c.waitFor((l) => l.startsWith('closed '))))
    const h = outcome(holder)
    const c = outcome(client)
    expect([h.failed, c.failed]).toEqual([[], []])
    expect(h.acked.size + c.acked.size).toBe(3000)
    expect(c.sent + c.served).toBeGreaterThan(0)
    const entries = await readAll(dir)
    expect(entries).toHaveLength(3000)
    expectAckedStored(entries, h.acked)
    expectAckedStored(entries, c.acked)
  })

  it('relay must be a boolean', async () => {
    await expect(openFileLog(tempDir(), { relay: 'yes' as unknown as boolean })).rejects.toThrow(new TypeError("relay must be a boolean, got 'yes'"))
  })

  it('the protocol: answers in any order, conditional verdicts and errors by code; a closing server answers what it read and refuses the rest as not relayed', async () => {
    const nonce = randomBytes(8).toString('hex')
    const held: Array<{ data: string; expected: bigint | undefined; resolve(r: bigint | undefined): void; reject(e: unknown): void }> = []
    let clients = -1
    const server = new RelayServer(nonce, {}, (entries) => entries.map((e) => new Promise<bigint | undefined>((resolve, reject) => {
      held.push({ data: Buffer.from(e.data).toString(), expected: e.expected, resolve, reject })
    })), (n) => { clients = n })
    expect(await server.listen()).toBe(true)
    const client = (await RelayClient.connect(nonce, {}, 10_000, 'test'))!
    expect(client.open).toBe(true)
    const first = client.send([{ data: Buffer.from('a'), expected: undefined }, { data: Buffer.from('b'), expected: -1n }, { data: Buffer.from('c'), expected: 7n }])
    const second = client.send([{ data: Buffer.from('d'), expected: undefined }])
    await expect.poll(() => held.length).toBe(4)
    expect(clients).toBe(1)
    expect(held.map((h) => [h.data, h.expected])).toEqual([['a', undefined], ['b', -1n], ['c', 7n], ['d', undefined]])
    // The second frame is answered first.
    held[3]!.resolve(3n)
    expect(await second).toEqual([3n])
    held[0]!.resolve(0n)
    held[1]!.resolve(undefined)
    held[2]!.reject(Object.assign(new TypeError('x'), {}))
    const [a, b, c] = await first
    expect([a, b]).toEqual([0n, undefined])
    expect(c).toMatchObject({ code: 'TIDEMARK_LOG_UNAVAILABLE' })
    // A frame read before the close is answered; one sent after it is not taken.
    const third = client.send([{ data: Buffer.from('e'), expected: undefined }])
    await expect.poll(() => held.length).toBe(5)
    const closing = server.close()
    const fourth = client.send([{ data: Buffer.from('f'), expected: undefined }])
    held[4]!.reject(Object.assign(new Error('closed'), { code: 'TIDEMARK_LOG_CLOSED' }))
    await expect(third).resolves.toEqual([expect.objectContaining({ code: 'TIDEMARK_LOG_UNAVAILABLE' })])
    await expect(fourth).rejects.toBeInstanceOf(NotRelayed)
    await closing
    expect(held).toHaveLength(5)
    expect(client.open).toBe(false)
    await expect(client.send([{ data: Buffer.from('g'), expected: undefined }])).rejects.toBeInstanceOf(NotRelayed)
    expect(await RelayClient.connect(nonce, {}, 10_000, 'test')).toBeUndefined()
  })

  it('a connection whose first frame is not the hello with the holder\'s nonce is ended, and nothing it sent is appended', async () => {
    // The socket's name is public (/proc/net/unix lists abstract sockets for every local user); the nonce
    // is known only to processes that can read the log's directory.
    const nonce = randomBytes(8).toString('hex')
    const name = relayName(nonce, {})
    const taken: string[] = []
    const server = new RelayServer(nonce, {}, (entries) => entries.map((e) => {
      taken.push(Buffer.from(e.data).toString())
      return Promise.resolve(0n)
    }), () => {})
    expect(await server.listen()).toBe(true)
    const frame = (body: Buffer): Buffer => {
      const length = Buffer.alloc(4)
      length.writeUInt32BE(body.length)
      return Buffer.concat([length, body])
    }
    const append = (data: string): Buffer => {
      const head = Buffer.alloc(8 + 13)
      head.writeUInt32BE(1, 0)
      head.writeUInt32BE(1, 4)
      head.writeUInt32BE(data.length, 8 + 9)
      return frame(Buffer.concat([head, Buffer.from(data)]))
    }
    const ended = async (...frames: Buffer[]): Promise<void> => {
      const socket = createConnection(name)
      await once(socket, 'connect')
      const closed = once(socket, 'close')
      socket.write(Buffer.concat(frames))
      await closed
    }
    await ended(append('no hello'))
    await ended(frame(Buffer.concat([Buffer.from('TMRH'), Buffer.from(randomBytes(8).toString('hex'))])), append('a guessed nonce'))
    await ended(frame(Buffer.from('TMRH')), append('an empty nonce'))
    // A first frame that declares a gigabyte is not buffered: the connection ends at its length.
    await ended(Buffer.from([0x3f, 0xff, 0xff, 0xff, 1, 2, 3]))
    expect(taken).toEqual([])
    // The client says hello with the nonce it read from the lock file.
    const client = (await RelayClient.connect(nonce, {}, 10_000, 'test'))!
    expect(await client.send([{ data: Buffer.from('with the nonce'), expected: undefined }])).toEqual([0n])
    expect(taken).toEqual(['with the nonce'])
    client.close()
    await server.close()
  })

  it('a holder that does not answer within the timeout: every frame in flight fails as in doubt and the connection ends', async () => {
    const nonce = randomBytes(8).toString('hex')
    const server = new RelayServer(nonce, {}, (entries) => entries.map(() => new Promise<bigint | undefined>(() => {})), () => {})
    expect(await server.listen()).toBe(true)
    const client = (await RelayClient.connect(nonce, {}, 200, 'pid 1'))!
    const first = client.send([{ data: Buffer.from('a'), expected: undefined }])
    const second = client.send([{ data: Buffer.from('b'), expected: undefined }])
    for (const sent of [first, second]) {
      await expect(sent).rejects.toMatchObject({ code: 'TIDEMARK_LOG_UNAVAILABLE', message: expect.stringContaining('(pid 1) did not answer a relayed append within 200 ms') })
    }
    expect(client.open).toBe(false)
    // Its server stops without waiting for answers that will never come to a client that is gone.
    await server.close()
  })

  it('a server that refuses a frame (its core lost the lock) answers the frames before it and hands that one and the rest back', async () => {
    const nonce = randomBytes(8).toString('hex')
    let holding = true
    let clients = -1
    const server = new RelayServer(nonce, {}, (entries) => (holding ? entries.map(() => Promise.resolve(1n)) : undefined), (n) => { clients = n })
    expect(await server.listen()).toBe(true)
    const client = (await RelayClient.connect(nonce, {}, 10_000, 'test'))!
    expect(await client.send([{ data: Buffer.from('a'), expected: undefined }])).toEqual([1n])
    holding = false
    const refused = client.send([{ data: Buffer.from('b'), expected: undefined }])
    const after = client.send([{ data: Buffer.from('c'), expected: undefined }])
    await expect(refused).rejects.toBeInstanceOf(NotRelayed)
    await expect(after).rejects.toBeInstanceOf(NotRelayed)
    expect(client.open).toBe(false)
    await expect.poll(() => clients).toBe(0)
    await server.close()
  })
})
