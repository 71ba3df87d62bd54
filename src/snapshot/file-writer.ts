/**
 * Writes restored files and hashes them off the event loop. A restore at
 * download speed is CPU-bound on the main thread (every byte is parsed out
 * of tar, hashed and written); SHA-256 alone is about 1 s per GB here, and
 * each write through libuv's pool costs the main thread a wake-up. One
 * worker thread per process takes both: the main thread copies each file's
 * bytes into batches of BATCH_BYTES and hands them over (transferred, not
 * copied again); the worker writes them with writeSync in WRITE_BYTES
 * pieces and hashes them as it goes.
 *
 * The worker writes to descriptors the main thread opened. A descriptor is
 * never closed while the worker may still write to it: end() and abort()
 * resolve only after the worker has handled every batch sent before them
 * (messages are handled in order), so a closed descriptor's number, reused
 * by another open, cannot receive a late write.
 *
 * The worker's code is a string (eval), so it runs the same from the
 * compiled package, under tsx and under vitest, with no file to resolve.
 */
import { Worker } from 'node:worker_threads'

/**
 * Bytes per message to the worker: few enough messages (about 8,000 per GB
 * each way) that their cost stays small, small enough that 16 partitions
 * restoring at once hold about 10 MiB of batches (npm run bench -- partitions
 * peaks near its 384 MB target).
 */
const BATCH_BYTES = 128 * 1024
/** Batches of one file in the worker's hands before write() asks its caller to wait. */
const MAX_IN_FLIGHT = 4
/**
 * The size of each write(2). Small on purpose: on the development VM
 * (ext4, Linux 6.18) the kernel's copy into a new file's freshly allocated
 * large folios costs more system CPU the larger the write (2 MiB writes
 * three times what 256 KiB writes cost). Through libuv's pool 64 KiB was
 * the best trade against a wake-up per write; here a write is a plain
 * syscall, and 16-32 KiB cost the least (512 MiB restores from radosgw,
 * interleaved with plain downloads: 1.07-1.24x of the download at 16-32
 * KiB, 1.31-1.63x at 64 KiB; hashing and 64 KiB writes on the event loop
 * 1.29-1.49x).
 */
const WRITE_BYTES = 32 * 1024

const WORKER_CODE = `
const { parentPort } = require('node:worker_threads')
const { createHash } = require('node:crypto')
const fs = require('node:fs')
const files = new Map()
parentPort.on('message', (m) => {
  if (m.t === 'abort') {
    files.delete(m.id)
    parentPort.postMessage({ t: 'aborted', id: m.id })
    return
  }
  let f = files.get(m.id)
  if (f === undefined) {
    f = { hash: createHash('sha256'), size: 0, failed: false }
    files.set(m.id, f)
  }
  if (!f.failed && m.buf !== undefined) {
    const buf = m.buf
    try {
      for (let at = 0; at < buf.byteLength;) {
        at += fs.writeSync(m.fd, buf, at, Math.min(${WRITE_BYTES}, buf.byteLength - at), null)
      }
      f.hash.update(buf)
      f.size += buf.byteLength
    } catch (err) {
      f.failed = true
      parentPort.postMessage({ t: 'error', id: m.id, message: err.message, code: err.code, errno: err.errno, syscall: err.syscall })
    }
  }
  if (m.last) {
    files.delete(m.id)
    if (!f.failed) parentPort.postMessage({ t: 'done', id: m.id, size: f.size, sha256: f.hash.digest('hex'), buf: m.buf }, m.buf === undefined ? [] : [m.buf.buffer])
  } else if (!f.failed) {
    parentPort.postMessage({ t: 'ack', id: m.id, buf: m.buf }, m.buf === undefined ? [] : [m.buf.buffer])
  }
})
`

type Reply =
  | { t: 'ack'; id: number; buf?: Uint8Array }
  | { t: 'aborted'; id: number }
  | { t: 'done'; id: number; size: number; sha256: string; buf?: Uint8Array }
  | { t: 'error'; id: number; message: string; code?: string; errno?: number; syscall?: string }

/** What the owner of one open file waits for. */
interface Pending {
  onAck(): void
  onDone(size: number, sha256: string): void
  onAborted(): void
  onError(error: Error): void
}

/** The process's worker; started on first use, unreferenced while no file is open so that it never keeps a process alive. */
class WriterThread {
  readonly #worker: Worker
  readonly #files = new Map<number, Pending>()
  #nextId = 0

  constructor() {
    try {
      this.#worker = new Worker(WORKER_CODE, { eval: true, name: 'tidemark-restore-writer' })
    } catch (err) {
      throw writerThreadError('the restore\'s writer thread could not start', err)
    }
    this.#worker.unref()
    this.#worker.on('message', (m: Reply) => {
      const p = this.#files.get(m.id)
      if (p === undefined) return
      switch (m.t) {
        case 'ack': reuse(m.buf); p.onAck(); break
        case 'done': reuse(m.buf); this.#forget(m.id); p.onDone(m.size, m.sha256); break
        case 'aborted': this.#forget(m.id); p.onAborted(); break
        case 'error': this.#forget(m.id); p.onError(Object.assign(new Error(m.message), { code: m.code, errno: m.errno, syscall: m.syscall })); break
      }
    })
    // The next file starts a new thread.
    const fail = (err: Error): void => {
      if (thread === this) thread = undefined
      for (const p of this.#files.values()) p.onError(err)
      this.#files.clear()
    }
    this.#worker.on('error', (err) => fail(writerThreadError('the restore\'s writer thread failed', err)))
    this.#worker.on('exit', (code) => fail(writerThreadError(`the restore's writer thread exited (code ${code})`)))
  }

  open(p: Pending): number {
    const id = this.#nextId++
    if (this.#files.size === 0) this.#worker.ref()
    this.#files.set(id, p)
    return id
  }

  send(id: number, fd: number, buf: Uint8Array | undefined, last: boolean): void {
    if (buf === undefined) this.#worker.postMessage({ t: 'w', id, fd, last })
    else this.#worker.postMessage({ t: 'w', id, fd, buf, last }, [buf.buffer as ArrayBuffer])
  }

  abort(id: number): void {
    this.#worker.postMessage({ t: 'abort', id })
  }

  terminate(): Promise<number> {
    return this.#worker.terminate()
  }

  #forget(id: number): void {
    this.#files.delete(id)
    if (this.#files.size === 0) {
      this.#worker.unref()
      freeBatches.length = 0
    }
  }
}

let thread: WriterThread | undefined

/**
 * The code of errors of the writer thread itself (it could not start, or
 * died): not the snapshot's fault and not an errno of the disk. The files in
 * progress fail with it; the next file starts a new thread.
 */
export const WRITER_THREAD_ERROR = 'ERR_TIDEMARK_WRITER_THREAD'

function writerThreadError(message: string, cause?: unknown): Error {
  return Object.assign(new Error(cause === undefined ? message : `${message}: ${(cause as Error)?.message ?? String(cause)}`, { cause }), { code: WRITER_THREAD_ERROR })
}

/** @internal For tests: ends the process's writer thread as a crash would. */
export async function terminateWriterThread(): Promise<void> {
  await thread?.terminate()
}
/**
 * Batches the worker handed back, reused while files are open: a fresh
 * 128 KiB ArrayBuffer per batch is a fresh mapping whose pages fault in
 * (zeroed) on the first copy. Emptied when the last open file finishes, so
 * that an idle process holds none.
 */
const freeBatches: ArrayBuffer[] = []
const MAX_FREE_BATCHES = 64

/** A batch the worker handed back (with the ack of a batch or the end of a file). */
function reuse(buf: Uint8Array | undefined): void {
  if (buf !== undefined && freeBatches.length < MAX_FREE_BATCHES) freeBatches.push(buf.buffer as ArrayBuffer)
}

/**
 * @internal A test seam (test/torture/enospc.ts): called on the main thread
 * with a file's descriptor before each batch is handed to the worker; a
 * throw fails the file as a failed write would (its writes stop, end()
 * rejects with the error), for faults that must hit files the caller opens
 * by path, such as a full disk under a restore's directory.
 */
export const writerFaults: { beforeWrite: ((fd: number) => void) | undefined } = { beforeWrite: undefined }

/**
 * One file being written by the worker: write() each chunk in order (await
 * it when it returns a promise: the worker is behind), then end() for the
 * size and SHA-256 of what was written, or abort() when the caller gives
 * up. After either settles the worker does not touch the descriptor again;
 * the caller owns it throughout and closes it. end() or abort() must be
 * called (a file in progress keeps the worker referenced); abort() after a
 * failed end() only waits for the same release.
 */
export class OffThreadFile {
  readonly #thread: WriterThread
  readonly #fd: number
  readonly #id: number
  #batch: Uint8Array | undefined
  #filled = 0
  #inFlight = 0
  #room: (() => void) | undefined
  #error: Error | undefined
  #result: { size: number; sha256: string } | undefined
  /** Resolved once the worker is done with the descriptor: the file was finished, aborted or failed there. */
  readonly #released: Promise<void>
  #release!: () => void
  /** The last message for this file (the end or an abort) was sent. */
  #stopping = false
  #ended = false

  constructor(fd: number) {
    this.#released = new Promise<void>((resolve) => { this.#release = resolve })
    this.#thread = thread ??= new WriterThread()
    this.#fd = fd
    this.#id = this.#thread.open({
      onAck: () => {
        this.#inFlight--
        this.#wake()
      },
      onDone: (size, sha256) => {
        this.#result = { size, sha256 }
        this.#release()
      },
      onAborted: () => this.#release(),
      // A write failed there (the worker writes nothing more of this file), or the worker died.
      onError: (error) => {
        this.#error ??= error
        this.#wake()
        this.#release()
      },
    })
  }

  /** Copies `chunk` into the current batch; a promise when the caller should wait before the next write. */
  write(chunk: Uint8Array): Promise<void> | undefined {
    if (this.#ended) throw new Error('OffThreadFile: write() after end() or abort()')
    if (this.#error !== undefined) throw this.#error
    let at = 0
    while (at < chunk.byteLength) {
      this.#batch ??= new Uint8Array(freeBatches.pop() ?? new ArrayBuffer(BATCH_BYTES))
      const n = Math.min(BATCH_BYTES - this.#filled, chunk.byteLength - at)
      this.#batch.set(at === 0 && n === chunk.byteLength ? chunk : chunk.subarray(at, at + n), this.#filled)
      this.#filled += n
      at += n
      if (this.#filled === BATCH_BYTES) {
        this.#flush(false)
        if (this.#error !== undefined) throw this.#error
      }
    }
    return this.#inFlight >= MAX_IN_FLIGHT ? this.#waitForRoom() : undefined
  }

  /** Sends what is left; resolves with the size and SHA-256 of all the bytes written, once they are. */
  async end(): Promise<{ size: number; sha256: string }> {
    this.#finish()
    if (this.#error === undefined) this.#flush(true)
    if (this.#error !== undefined) this.#stop()
    await this.#released
    if (this.#error !== undefined) throw this.#error
    return this.#result!
  }

  /** Drops what is not written yet; resolves once the worker is done with the descriptor. */
  async abort(): Promise<void> {
    if (!this.#ended) this.#finish()
    this.#batch = undefined
    this.#stop()
    await this.#released
  }

  #finish(): void {
    if (this.#ended) throw new Error('OffThreadFile: end() was called already')
    this.#ended = true
  }

  #stop(): void {
    if (this.#stopping) return
    this.#stopping = true
    this.#thread.abort(this.#id)
  }

  #flush(last: boolean): void {
    const batch = this.#batch
    const buf = batch === undefined || this.#filled === 0 ? undefined : batch.subarray(0, this.#filled)
    this.#batch = undefined
    this.#filled = 0
    if (buf !== undefined && writerFaults.beforeWrite !== undefined) {
      try {
        writerFaults.beforeWrite(this.#fd)
      } catch (err) {
        this.#error ??= err as Error
        return
      }
    }
    if (last) this.#stopping = true
    else this.#inFlight++
    // A view of the batch: the message transfers its whole ArrayBuffer, the worker reads the view.
    this.#thread.send(this.#id, this.#fd, buf, last)
  }

  #waitForRoom(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.#room = () => (this.#error === undefined ? resolve() : reject(this.#error))
    })
  }

  #wake(): void {
    if (this.#room !== undefined && (this.#inFlight < MAX_IN_FLIGHT || this.#error !== undefined)) {
      const room = this.#room
      this.#room = undefined
      room()
    }
  }
}
