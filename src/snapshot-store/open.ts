import { stat } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { TidemarkError } from '../errors.js'
import { FsSnapshotStore } from './fs-store.js'
import { snapshotStoreSchemes, type S3StoreSettings } from './schemes.js'
import type { SnapshotStore } from './snapshot-store.js'
import { describeValue } from '../util/describe-value.js'

export interface OpenSnapshotStoreOptions {
  /** Options for s3:// URLs beyond those the URL carries; they win over the URL's query parameters. */
  s3?: S3StoreSettings
  /**
   * Refuse a file:// root that does not exist or is not a directory
   * (TIDEMARK_DFS_STORE_NOT_FOUND) instead of reading it as an empty store.
   * For readers: a mistyped path would otherwise list no snapshots and
   * succeed. Writers leave it off, as the root is created on the first put.
   * An s3:// store needs no check: a missing bucket fails its first request.
   */
  mustExist?: boolean
}

const S3_QUERY_PARAMETERS = new Set(['endpoint', 'region', 'forcePathStyle'])

/**
 * Opens a snapshot store from its URL:
 * - `file:///var/lib/app/snapshots`: the file-system store;
 * - `s3://bucket/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1&forcePathStyle=true`:
 *   the S3 store, with credentials from `options.s3` or the standard AWS chain.
 */
export async function openSnapshotStore(url: string, options: OpenSnapshotStoreOptions = {}): Promise<SnapshotStore> {
  if (typeof url !== 'string') throw new TypeError(`url must be a string, got ${typeof url}`)
  if (typeof options !== 'object' || options === null) throw new TypeError(`options must be an object, got ${describeValue(options)}`)
  if (options.mustExist !== undefined && typeof options.mustExist !== 'boolean') throw new TypeError(`options.mustExist must be a boolean, got ${typeof options.mustExist}`)
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw new RangeError(`snapshot store URL '${url}' is not a URL; expected file:///absolute/path or s3://bucket/prefix`)
  }
  if (parsed.username !== '' || parsed.password !== '') {
    throw new RangeError('snapshot store URLs must not carry credentials; pass them as options.s3.credentials')
  }
  switch (parsed.protocol) {
    case 'file:': {
      // The URL parser reads file:relative/dir as file:///relative/dir, so a
      // relative path would silently land at the file-system root: the raw
      // text after the scheme must start with a slash (file:///abs, file:/abs
      // or file://localhost/abs).
      if (!url.trim().slice(parsed.protocol.length).startsWith('/')) {
        throw new RangeError(`snapshot store URL '${url}' is not absolute; expected file:///absolute/path`)
      }
      if (parsed.host !== '' && parsed.host !== 'localhost') {
        throw new RangeError(`snapshot store URL '${url}' names the host '${parsed.host}'; file URLs must be absolute and local (file:///absolute/path): mount a remote share and use its local path`)
      }
      if (parsed.search !== '' || parsed.hash !== '') throw new RangeError(`snapshot store URL '${url}' must not have a query or a fragment`)
      const root = fileURLToPath(parsed)
      if (options.mustExist === true) await checkRoot(url, root)
      return new FsSnapshotStore({ root })
    }
    case 's3:': {
      const fromQuery: Partial<S3StoreSettings> = {}
      for (const [name, value] of parsed.searchParams) {
        if (!S3_QUERY_PARAMETERS.has(name)) {
          throw new RangeError(`snapshot store URL '${url}' has an unknown parameter '${name}'; known: ${[...S3_QUERY_PARAMETERS].join(', ')}`)
        }
        if (name === 'forcePathStyle') {
          if (value !== 'true' && value !== 'false') throw new RangeError(`forcePathStyle in snapshot store URL '${url}' must be true or false, got '${value}'`)
          fromQuery.forcePathStyle = value === 'true'
        } else {
          fromQuery[name as 'endpoint' | 'region'] = value
        }
      }
      // The S3 connector registers the scheme when its entry point is
      // imported; an app that did not import it needs no set-up call: the
      // entry is loaded now (with the AWS SDK), by its package name.
      const openS3 = await snapshotStoreSchemes.load('s3:', 'tidemark/s3').catch((err: unknown) => { throw clientMissing(err) })
      if (openS3 === undefined) throw new Error("tidemark/s3 was loaded but registered no 's3:' scheme")
      return openS3({
        ...fromQuery,
        ...options.s3,
        bucket: decodeURIComponent(parsed.host),
        prefix: decodeURIComponent(parsed.pathname),
      })
    }
    default:
      throw new RangeError(`snapshot store URL '${url}' has an unsupported scheme '${parsed.protocol}'; expected file: or s3:`)
  }
}

/**
 * The AWS SDK is an optional peer dependency (a file-system-only user
 * installs without it), so its absence shows up here, at the first s3:// URL,
 * as Node's module-not-found error naming a package the user never asked for.
 */
function clientMissing(err: unknown): unknown {
  const e = err as NodeJS.ErrnoException
  if (e?.code !== 'ERR_MODULE_NOT_FOUND' || !/'@(aws-sdk|smithy)\//.test(String(e.message))) return err
  return new TidemarkError(
    'TIDEMARK_DFS_CLIENT_MISSING',
    's3:// snapshot stores need the AWS SDK, an optional peer dependency of tidemark that is not installed: npm install @aws-sdk/client-s3',
    { cause: err, details: { package: '@aws-sdk/client-s3' } },
  )
}

async function checkRoot(url: string, root: string): Promise<void> {
  let isDirectory: boolean
  try {
    isDirectory = (await stat(root)).isDirectory()
  } catch (err) {
    const errno = (err as NodeJS.ErrnoException).code
    if (errno === 'ENOENT' || errno === 'ENOTDIR') isDirectory = false
    else {
      const code = errno === 'EACCES' || errno === 'EPERM' ? 'TIDEMARK_DFS_ACCESS_DENIED' : 'TIDEMARK_DFS_REQUEST_FAILED'
      throw new TidemarkError(code, `snapshot store ${url}: cannot read its root ${root} (${errno ?? 'unknown'})`, { cause: err, details: { path: root } })
    }
  }
  if (!isDirectory) {
    throw new TidemarkError('TIDEMARK_DFS_STORE_NOT_FOUND', `snapshot store ${url} does not exist: ${root} is not a directory`, { details: { path: root } })
  }
}
