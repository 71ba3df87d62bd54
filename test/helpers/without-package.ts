import { execFile } from 'node:child_process'
import { writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { tempDir } from './tmp.js'

const run = promisify(execFile)
const root = join(import.meta.dirname, '..', '..')

/**
 * Runs `args` in a fresh Node process (through tsx, from the repo root) in
 * which the optional peer `pkg` is not installed: a module hook fails its
 * resolution exactly as Node does for a package that is absent
 * (ERR_MODULE_NOT_FOUND for import, MODULE_NOT_FOUND for require(), also a
 * createRequire() one, which module hooks do not see on every Node line);
 * every other module is the real one.
 * npm run test:package checks the same in an app that lacks it.
 */
export async function withoutPackage(pkg: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const dir = tempDir('tidemark-without-')
  await writeFile(join(dir, 'hooks.mjs'), `
    export async function resolve(specifier, context, next) {
      if (specifier === ${JSON.stringify(pkg)}) {
        const error = new Error("Cannot find package '" + specifier + "' imported from " + context.parentURL)
        error.code = 'ERR_MODULE_NOT_FOUND'
        throw error
      }
      return next(specifier, context)
    }
  `)
  await writeFile(join(dir, 'register.mjs'), `
    import Module, { register } from 'node:module'
    register('./hooks.mjs', import.meta.url)
    const resolveFilename = Module._resolveFilename
    Module._resolveFilename = function (request, ...rest) {
      if (request === ${JSON.stringify(pkg)} || request.startsWith(${JSON.stringify(`${pkg}/`)})) {
        const error = new Error("Cannot find module '" + request + "'")
        error.code = 'MODULE_NOT_FOUND'
        throw error
      }
      return resolveFilename.call(this, request, ...rest)
    }
  `)
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', pathToFileURL(join(dir, 'register.mjs')).href, '--import', 'tsx', ...args], { cwd: root })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string }
    return { code: e.code, stdout: e.stdout, stderr: e.stderr }
  }
}
