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
 * which the optional peer `pkg` is not installed: module hooks fail its
 * resolution exactly as Node does for a package that is absent
 * (ERR_MODULE_NOT_FOUND for import, MODULE_NOT_FOUND for require(), also a
 * createRequire() one); every other module is the real one. The hooks are
 * synchronous ones (module.registerHooks, Node 22.15+), which see import and
 * require() alike; older lines get module.register's (import only; Node 26
 * deprecates it with a warning on stderr) and a wrapped CommonJS resolver.
 * npm run test:package checks the same in an app that lacks it.
 */
export async function withoutPackage(pkg: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const dir = tempDir('tidemark-without-')
  const common = `
    const PKG = ${JSON.stringify(pkg)}
    export const hidden = (specifier) => specifier === PKG || specifier.startsWith(PKG + '/')
    export function missing(specifier, parentURL, required) {
      const error = new Error(required ? "Cannot find module '" + specifier + "'" : "Cannot find package '" + specifier + "' imported from " + parentURL)
      error.code = required ? 'MODULE_NOT_FOUND' : 'ERR_MODULE_NOT_FOUND'
      return error
    }
  `
  await writeFile(join(dir, 'missing.mjs'), common)
  await writeFile(join(dir, 'hooks.mjs'), `
    import { hidden, missing } from './missing.mjs'
    export async function resolve(specifier, context, next) {
      if (hidden(specifier)) throw missing(specifier, context.parentURL, false)
      return next(specifier, context)
    }
  `)
  await writeFile(join(dir, 'register.mjs'), `
    import Module from 'node:module'
    import { hidden, missing } from './missing.mjs'
    if (typeof Module.registerHooks === 'function') {
      Module.registerHooks({
        resolve(specifier, context, next) {
          if (hidden(specifier)) throw missing(specifier, context.parentURL, context.conditions?.includes('require') === true)
          return next(specifier, context)
        },
      })
    } else {
      Module.register('./hooks.mjs', import.meta.url)
      const resolveFilename = Module._resolveFilename
      Module._resolveFilename = function (request, ...rest) {
        if (hidden(request)) throw missing(request, undefined, true)
        return resolveFilename.call(this, request, ...rest)
      }
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
