import { createHash, timingSafeEqual } from 'node:crypto'
import { createConnection, createServer, type Server, type Socket } from 'node:net'
import { ERROR_CODES, TidemarkError, type ErrorCode } from '../errors.js'

/**
 * Appends of other processes, relayed to the holder of a file log's append
 * lock over a local socket, so that they join its groups (one write, one
 * fdatasync for everyone) instead of taking the lock in turn.
 *
 * Why: processes that take the lock in turn pay, per turn, a catch-up, a
 * write and the lock file's link/unlink, each a file-system metadata
 * operation that waits for the journal commit of the other processes'
 * fdatasync (measured: 40-250 us each, 0.2-0.3x one writer's rate for 4
 * processes). Relayed, they share the holder's groups as the handles of one
 * process do.
 *
 * The socket is in Linux's abstract namespace (no file to leave behind when
 * its process is killed, no path-length limit); its name is derived from the
 * holder's lock nonce and the log's options, so a process reaches only a
 * holder whose log has the same options (the same `sync` above all: a
 * relayed append is answered under the holder's). Elsewhere there is no
 * relay and processes take turns through the lock file.
 *
 * Who may relay: an abstract socket has no file permissions, and its name is
 * listed in /proc/net/unix for every local user to see. So a connection's
 * first frame must be the hello, `TMRH` and the holder's lock nonce, which
 * only a process that can read the log's directory knows (it is in the
 * lock file and in the name of the holder's private lock file); the holder
 * ends a connection whose first frame is anything else, having appended
 * nothing of it.
 *
 * Frames, all integers big-endian, each preceded by its u32 length:
 * - hello (client to holder, first): `TMRH`, then the nonce (UTF-8);
 * - append (client to holder): u32 frame id (1, 2, ... per connection),
 *   u32 count, then per entry u8 conditional, u64 expected revision, u32
 *   length, bytes;
 * - answer (holder to client): u8 1, u32 frame id, u32 count, then per entry
 *   u8 status (0 written, 1 lost its condition, 2 failed) and u64 revision;
 *   when an entry failed, u16 + code and u32 + message of the first failure;
 * - bye (holder to client): u8 2, u32 id of the last frame it accepted. The
 *   frames after it were never read: the client appends them itself.
 *
 * The holder answers a frame when every entry of it is answered, i.e. after
 * the flush that made them durable. A holder that dies leaves its clients'
 * unanswered entries in doubt (written or not), as a write that fails does;
 * they are failed with TIDEMARK_LOG_UNAVAILABLE.
 */

/** @internal Frames this process relayed and served: for tests, which must see that a relay took place. */
export const relayStats = { sent: 0, served: 0 }

export function relaySupported(): boolean {
  return process.platform === 'linux'
}

/** The socket name of the lock holder with `nonce`, for a log opened with `options`. */
export function relayName(nonce: string, options: unknown): string {
  return `\0tidemark-file-log-${createHash('sha256').update(`${nonce}\n${JSON.stringify(options)}`).digest('hex').slice(0, 40)}`
}

export interface RelayedEntry {
  data: Uint8Array
  expected: bigint | undefined
}

/** An entry's answer: its revision, undefined for a conditional entry that lost, or the error it failed with. */
export type RelayVerdict = bigint | undefined | Error

/** The holder stopped serving before it read the frame: nothing of it was appended; the client appends it itself. */
export class NotRelayed extends Error {}

const HELLO_MAGIC = Buffer.from('TMRH', 'latin1')
const APPEND_HEAD = 8
const ENTRY_HEAD = 13
const ANSWER = 1
const BYE = 2
const STATUS_WRITTEN = 0
const STATUS_LOST = 1
const STATUS_FAILED = 2
/** A frame larger than this is refused as garbage: entries are bounded by maxRecordBytes, frames by the group caps. */
const MAX_FRAME_BYTES = 1024 * 1024 * 1024

/** Splits a byte stream into length-prefixed frames. */
class Frames {
  #buf: Buffer = Buffer.alloc(0)
  /** The largest first frame: a holder reads no more than a hello from a connection that has not said it. */
  readonly #firstLimit: number
  #first = true

  constructor(firstLimit = MAX_FRAME_BYTES) {
    this.#firstLimit = firstLimit
  }

  /** The whole frames in `chunk` and what came before; throws on a length no frame can have. */
  push(chunk: Buffer): Buffer[] {
    this.#buf = this.#buf.length === 0 ? chunk : Buffer.concat([this.#buf, chunk])
    const out: Buffer[] = []
    let at = 0
    while (this.#buf.length - at >= 4) {
      const length = this.#buf.readUInt32BE(at)
      if (length > (this.#first ? this.#firstLimit : MAX_FRAME_BYTES)) throw new Error(`relay frame of ${length} bytes`)
      this.#first = false
      if (this.#buf.length - at - 4 < length) break
      out.push(this.#buf.subarray(at + 4, at + 4 + length))
      at += 4 + length
    }
    this.#buf = at === this.#buf.length ? Buffer.alloc(0) : this.#buf.subarray(at)
    return out
  }
}

/** Appends a frame's entries and answers each, or undefined to refuse the frame (this process no longer holds the lock): the connection then ends with a bye before it. */
export type RelayAccept = (entries: RelayedEntry[]) => Array<Promise<bigint | undefined>> | undefined

/**
 * The holder's side: accepts connections and hands each frame's entries to
 * `accept`, which appends them as its own and settles each entry's promise
 * once it is answered.
 */
export class RelayServer {
  readonly #name: string
  readonly #hello: Buffer
  readonly #accept: RelayAccept
  readonly #onClients: (clients: number) => void
  #server: Server | undefined
  readonly #connections = new Set<Connection>()

  /** The holder's lock `nonce` and its log's `options` name the socket (relayName); a client's hello must carry the nonce. */
  constructor(nonce: string, options: unknown, accept: RelayAccept, onClients: (clients: number) => void) {
    this.#name = relayName(nonce, options)
    this.#hello = encodeHello(nonce).subarray(4)
    this.#accept = accept
    this.#onClients = onClients
  }

  get clients(): number {
    return this.#connections.size
  }

  /** Listens; false when the socket cannot be made (then the holder serves nobody, and others take turns through the lock file). */
  listen(): Promise<boolean> {
    return new Promise((resolve) => {
      const server = createServer((socket) => {
        const connection = new Connection(socket, this.#hello, this.#accept, () => {
          this.#connections.delete(connection)
          this.#onClients(this.#connections.size)
        })
        this.#connections.add(connection)
        this.#onClients(this.#connections.size)
      })
      server.once('error', () => resolve(false))
      server.listen(this.#name, () => {
        server.removeAllListeners('error')
        // A failure after listening only ends the relay; appends go on through the lock.
        server.on('error', () => server.close())
        server.unref()
        this.#server = server
        resolve(true)
      })
    })
  }

  /** Stops serving: no new connection or frame; frames accepted are answered, then each client is told which was the last. */
  async close(): Promise<void> {
    const server = this.#server
    this.#server = undefined
    // net.Server.close() calls back only once every connection ended, which
    // ours do after their last answer: stop listening, then close them.
    const stopped = server === undefined ? undefined : new Promise<void>((resolve) => server.close(() => resolve()))
    await Promise.all([...this.#connections].map((c) => c.close()))
    await stopped
  }
}

class Connection {
  readonly #socket: Socket
  readonly #frames: Frames
  #lastAccepted = 0
  #answering = 0
  /** close() in progress or done: no frame is read once it began. */
  #stopping: Promise<void> | undefined
  /** Sends the bye once nothing is being answered (or the socket is gone). */
  #finish: (() => void) | undefined
  #ended = false
  /** The hello this connection's first frame must be; undefined once it was. */
  #hello: Buffer | undefined

  constructor(socket: Socket, hello: Buffer, accept: RelayAccept, onEnd: () => void) {
    this.#hello = hello
    // Before the hello nothing larger is buffered: a connection that declares
    // a gigabyte first is ended at its first four bytes.
    this.#frames = new Frames(hello.length)
    this.#socket = socket
    socket.setNoDelay(true)
    // A client's connection keeps no process alive: the appends it relays do
    // (the file work they start), like the holder's own.
    socket.unref()
    socket.on('data', (chunk: Buffer) => {
      if (this.#stopping !== undefined || this.#ended) return
      let frames: Buffer[]
      try {
        frames = this.#frames.push(chunk)
      } catch {
        socket.destroy()
        return
      }
      for (const frame of frames) {
        if (this.#hello !== undefined) {
          if (frame.length !== this.#hello.length || !timingSafeEqual(frame, this.#hello)) {
            // Not a process that can read the log's directory: nothing of it is appended.
            socket.destroy()
            return
          }
          this.#hello = undefined
          continue
        }
        let id: number
        let entries: RelayedEntry[]
        try {
          ;({ id, entries } = decodeAppend(frame))
        } catch {
          // Not a client of this module: nothing of it is appended.
          socket.destroy()
          return
        }
        const answers = accept(entries)
        if (answers === undefined) {
          // Not the holder any more: this frame and the ones after it go
          // back to the client, which looks for the holder again.
          void this.close()
          return
        }
        this.#lastAccepted = id
        this.#answering += 1
        relayStats.served += 1
        void this.#answer(id, answers)
      }
    })
    socket.on('error', () => socket.destroy())
    socket.on('close', () => {
      this.#ended = true
      onEnd()
      this.#finish?.()
    })
  }

  async #answer(id: number, answers: Array<Promise<bigint | undefined>>): Promise<void> {
    const verdicts: RelayVerdict[] = await Promise.all(answers.map((a) => a.then((r) => r, (err: unknown) => (err instanceof Error ? err : new Error(String(err))))))
    if (!this.#ended) this.#socket.write(encodeAnswer(id, verdicts))
    this.#answering -= 1
    if (this.#answering === 0) this.#finish?.()
  }

  /** Answers what was read, then says which frame was the last and ends; once (a refused frame and the server's close both call it). */
  close(): Promise<void> {
    this.#stopping ??= new Promise((resolve) => {
      this.#finish = () => {
        if (this.#answering > 0 && !this.#ended) return
        this.#finish = undefined
        if (this.#ended) return resolve()
        this.#socket.once('close', () => resolve())
        this.#socket.end(encodeBye(this.#lastAccepted))
      }
      this.#finish()
    })
    return this.#stopping
  }
}

/** The client's side: one connection to a holder, frames answered in any order. */
export class RelayClient {
  readonly #socket: Socket
  readonly #frames = new Frames()
  readonly #timeoutMs: number
  readonly #holder: string
  readonly #pending = new Map<number, { resolve(v: RelayVerdict[]): void; reject(e: unknown): void; timer: NodeJS.Timeout }>()
  #nextId = 1
  #bye: number | undefined
  /** Why #fail ended the connection: what the frames still in flight fail with. */
  #failure: TidemarkError | undefined
  #open = true

  private constructor(socket: Socket, timeoutMs: number, holder: string) {
    this.#socket = socket
    this.#timeoutMs = timeoutMs
    this.#holder = holder
    socket.setNoDelay(true)
    socket.on('data', (chunk: Buffer) => {
      let frames: Buffer[]
      try {
        frames = this.#frames.push(chunk)
        for (const frame of frames) this.#receive(frame)
      } catch {
        socket.destroy()
      }
    })
    socket.on('error', () => socket.destroy())
    socket.on('close', () => this.#closed())
    // Idle connections keep no process alive; a frame in flight refs it (send).
    socket.unref()
  }

  /** Connects to the socket of the holder with lock `nonce` for a log with `options`, and says hello; undefined when nobody listens there. */
  static connect(nonce: string, options: unknown, timeoutMs: number, holder: string): Promise<RelayClient | undefined> {
    return new Promise((resolve) => {
      const socket = createConnection(relayName(nonce, options))
      socket.once('error', () => {
        socket.destroy()
        resolve(undefined)
      })
      socket.once('connect', () => {
        socket.removeAllListeners('error')
        // First, before any append: the holder reads the frames in order.
        socket.write(encodeHello(nonce))
        resolve(new RelayClient(socket, timeoutMs, holder))
      })
    })
  }

  get open(): boolean {
    return this.#open
  }

  /** Relays the entries as one frame; rejects with NotRelayed when the holder did not read it, with TIDEMARK_LOG_UNAVAILABLE when its outcome is unknown. */
  send(entries: readonly RelayedEntry[]): Promise<RelayVerdict[]> {
    if (!this.#open) return Promise.reject(new NotRelayed('the relay is closed'))
    const id = this.#nextId++
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#fail(new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `the process holding the append lock (${this.#holder}) did not answer a relayed append within ${this.#timeoutMs} ms (lockTimeoutMs); the entries may or may not be in the log`, { details: { holder: this.#holder } }))
      }, this.#timeoutMs)
      this.#pending.set(id, { resolve, reject, timer })
      if (this.#pending.size === 1) this.#socket.ref()
      this.#socket.write(encodeAppend(id, entries))
      relayStats.sent += 1
    })
  }

  close(): void {
    this.#open = false
    this.#socket.destroy()
  }

  #receive(frame: Buffer): void {
    const type = frame[0]
    if (type === BYE) {
      this.#bye = frame.readUInt32BE(1)
      this.#open = false
      return
    }
    if (type !== ANSWER) throw new Error(`relay frame of type ${type}`)
    const { id, verdicts } = decodeAnswer(frame)
    const pending = this.#pending.get(id)
    if (pending === undefined) return
    this.#pending.delete(id)
    clearTimeout(pending.timer)
    if (this.#pending.size === 0) this.#socket.unref()
    pending.resolve(verdicts)
  }

  #closed(): void {
    this.#open = false
    const bye = this.#bye
    for (const [id, pending] of this.#pending) {
      clearTimeout(pending.timer)
      if (bye !== undefined && id > bye) {
        pending.reject(new NotRelayed(`the holder (${this.#holder}) stopped serving before it read this append`))
      } else {
        pending.reject(this.#failure ?? new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `the process holding the append lock (${this.#holder}), to which this append was relayed, went away before answering; the entries may or may not be in the log`, { details: { holder: this.#holder } }))
      }
    }
    this.#pending.clear()
  }

  /** Ends the connection; every frame in flight fails with `error` (#closed): once one is in doubt all are, the order of the answers says nothing about the order of the writes. */
  #fail(error: TidemarkError): void {
    this.#failure = error
    this.close()
  }
}

function encodeHello(nonce: string): Buffer {
  const body = Buffer.from(nonce, 'utf8')
  const b = Buffer.allocUnsafe(4 + HELLO_MAGIC.length + body.length)
  b.writeUInt32BE(HELLO_MAGIC.length + body.length, 0)
  HELLO_MAGIC.copy(b, 4)
  body.copy(b, 4 + HELLO_MAGIC.length)
  return b
}

function encodeAppend(id: number, entries: readonly RelayedEntry[]): Buffer {
  let size = APPEND_HEAD
  for (const e of entries) size += ENTRY_HEAD + e.data.byteLength
  const b = Buffer.allocUnsafe(4 + size)
  b.writeUInt32BE(size, 0)
  b.writeUInt32BE(id, 4)
  b.writeUInt32BE(entries.length, 8)
  let at = 12
  for (const e of entries) {
    b[at] = e.expected === undefined ? 0 : 1
    b.writeBigUInt64BE(e.expected === undefined ? 0n : BigInt.asUintN(64, e.expected), at + 1)
    b.writeUInt32BE(e.data.byteLength, at + 9)
    b.set(e.data, at + ENTRY_HEAD)
    at += ENTRY_HEAD + e.data.byteLength
  }
  return b
}

function decodeAppend(frame: Buffer): { id: number; entries: RelayedEntry[] } {
  const id = frame.readUInt32BE(0)
  const count = frame.readUInt32BE(4)
  const entries: RelayedEntry[] = []
  let at = APPEND_HEAD
  for (let i = 0; i < count; i++) {
    if (frame.length - at < ENTRY_HEAD) throw new Error('short relay frame')
    const conditional = frame[at] === 1
    // expected is -1 for "the log is empty": kept as the signed value it was.
    const expected = conditional ? BigInt.asIntN(64, frame.readBigUInt64BE(at + 1)) : undefined
    const length = frame.readUInt32BE(at + 9)
    if (frame.length - at - ENTRY_HEAD < length) throw new Error('short relay frame')
    // A copy: the frame's buffer may be the socket's, reused after this turn.
    entries.push({ data: Buffer.from(frame.subarray(at + ENTRY_HEAD, at + ENTRY_HEAD + length)), expected })
    at += ENTRY_HEAD + length
  }
  if (at !== frame.length) throw new Error('long relay frame')
  return { id, entries }
}

function encodeAnswer(id: number, verdicts: readonly RelayVerdict[]): Buffer {
  const failure = verdicts.find((v): v is Error => v instanceof Error)
  const code = Buffer.from(failure === undefined ? '' : failureCode(failure), 'utf8')
  const message = Buffer.from(failure === undefined ? '' : failure.message, 'utf8')
  const size = 9 + 9 * verdicts.length + (failure === undefined ? 0 : 2 + code.length + 4 + message.length)
  const b = Buffer.allocUnsafe(4 + size)
  b.writeUInt32BE(size, 0)
  b[4] = ANSWER
  b.writeUInt32BE(id, 5)
  b.writeUInt32BE(verdicts.length, 9)
  let at = 13
  for (const v of verdicts) {
    b[at] = v instanceof Error ? STATUS_FAILED : v === undefined ? STATUS_LOST : STATUS_WRITTEN
    b.writeBigUInt64BE(typeof v === 'bigint' ? v : 0n, at + 1)
    at += 9
  }
  if (failure !== undefined) {
    b.writeUInt16BE(code.length, at)
    code.copy(b, at + 2)
    at += 2 + code.length
    b.writeUInt32BE(message.length, at)
    message.copy(b, at + 4)
  }
  return b
}

function encodeBye(lastAccepted: number): Buffer {
  const b = Buffer.allocUnsafe(9)
  b.writeUInt32BE(5, 0)
  b[4] = BYE
  b.writeUInt32BE(lastAccepted, 5)
  return b
}

function decodeAnswer(frame: Buffer): { id: number; verdicts: RelayVerdict[] } {
  const id = frame.readUInt32BE(1)
  const count = frame.readUInt32BE(5)
  const statuses: number[] = []
  const revisions: bigint[] = []
  let at = 9
  for (let i = 0; i < count; i++) {
    statuses.push(frame[at]!)
    revisions.push(frame.readBigUInt64BE(at + 1))
    at += 9
  }
  let failure: Error | undefined
  if (statuses.includes(STATUS_FAILED)) {
    const codeLength = frame.readUInt16BE(at)
    const code = frame.toString('utf8', at + 2, at + 2 + codeLength)
    at += 2 + codeLength
    const message = frame.toString('utf8', at + 4, at + 4 + frame.readUInt32BE(at))
    // The holder's error, by its code; anything else it failed with is, to
    // this process, its log's storage failing.
    failure = Object.hasOwn(ERROR_CODES, code)
      ? new TidemarkError(code as ErrorCode, message)
      : new TidemarkError('TIDEMARK_LOG_UNAVAILABLE', `the process holding the append lock failed the relayed append: ${message}`)
  }
  return { id, verdicts: statuses.map((s, i) => (s === STATUS_WRITTEN ? revisions[i]! : s === STATUS_LOST ? undefined : failure!)) }
}

function failureCode(error: Error): string {
  return error instanceof TidemarkError ? error.code : ''
}
