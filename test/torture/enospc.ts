// A full disk, injected by wrapping single file-system calls: the promise
// API's open (its file handle's write) and copyFile, the callback API's open
// that the restore's archive writer binds when it loads, and the writes of
// the restore's writer thread through its seam.
// Import this module before anything of src/, so that those bindings take
// the wrappers; nothing fails until a rule is set.
import fs from 'node:fs'
import type * as FsPromises from 'node:fs/promises'
import { createRequire, syncBuiltinESMExports } from 'node:module'
import { writerFaults } from '../../src/snapshot/file-writer.js'

export type FsOp = 'write' | 'copyFile'

/** Decides whether this call finds the disk full: the op and the path written. */
type Rule = (op: FsOp, path: string) => boolean

let rule: Rule | undefined
let injected = 0

export const enospc = {
  /** From now on, calls for which `fail` says true fail with ENOSPC. */
  set(fail: Rule): void {
    rule = fail
  },
  /** Space is back. */
  clear(): void {
    rule = undefined
  },
  get injected(): number {
    return injected
  },
}

function check(op: FsOp, path: string): void {
  if (rule?.(op, path) === true) {
    injected++
    throw Object.assign(new Error(`ENOSPC: no space left on device, ${op} '${path}'`), { code: 'ENOSPC', errno: -28, syscall: op, path })
  }
}

const require = createRequire(import.meta.url)
const fsp = require('node:fs/promises') as typeof FsPromises

const realOpen = fsp.open
fsp.open = (async (path: fs.PathLike, flags?: string | number, mode?: fs.Mode) => {
  const handle = await realOpen(path, flags, mode)
  const write = handle.write.bind(handle) as (...args: unknown[]) => Promise<unknown>
  Object.defineProperty(handle, 'write', {
    value: async (...args: unknown[]) => {
      check('write', String(path))
      return write(...args)
    },
  })
  return handle
}) as typeof fsp.open

const realCopyFile = fsp.copyFile
fsp.copyFile = (async (src: fs.PathLike, dest: fs.PathLike, mode?: number) => {
  check('copyFile', String(dest))
  return realCopyFile(src, dest, mode)
}) as typeof fsp.copyFile
syncBuiltinESMExports()

// The callback API: the descriptor's path is remembered at open.
const paths = new Map<number, string>()
const realCbOpen = fs.open
fs.open = ((path: fs.PathLike, ...rest: unknown[]) => {
  const callback = rest.pop() as (err: NodeJS.ErrnoException | null, fd: number) => void
  ;(realCbOpen as (...a: unknown[]) => void)(path, ...rest, (err: NodeJS.ErrnoException | null, fd: number) => {
    if (err === null) paths.set(fd, String(path))
    callback(err, fd)
  })
}) as typeof fs.open
// The restore's writes run in its writer thread (src/snapshot/file-writer.ts),
// out of reach of a wrapper here: its seam checks each batch's descriptor on
// the main thread before the batch is handed over.
writerFaults.beforeWrite = (fd) => check('write', paths.get(fd) ?? `fd ${fd}`)
