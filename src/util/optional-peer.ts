import type { ErrorCode } from '../errors.js'
import { TidemarkError } from '../errors.js'

/**
 * Loads an optional peer dependency (kafkajs, prom-client: CommonJS
 * packages) with the `require` of the connector that needs it. A static
 * `import ... from 'kafkajs'` in an app without kafkajs fails while Node
 * links the module graph, before any Tidemark code runs, with Node's bare
 * ERR_MODULE_NOT_FOUND naming a package the user never asked for; a
 * require() at the connector's first evaluation fails with `code`, which
 * says what to install. A missing file inside an installed package is
 * thrown as it is.
 */
export function requireOptionalPeer<T>(require: NodeJS.Require, name: string, code: ErrorCode, entry: string): T {
  try {
    return require(name) as T
  } catch (err) {
    const e = err as NodeJS.ErrnoException
    if (e?.code !== 'MODULE_NOT_FOUND' || !String(e.message).startsWith(`Cannot find module '${name}'`)) throw err
    throw new TidemarkError(code, `${entry} needs ${name}, an optional peer dependency of tidemark that is not installed: npm install ${name}`, {
      cause: err,
      details: { package: name },
    })
  }
}
