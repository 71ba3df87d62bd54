const SWITCH = 'AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED'

/**
 * Runs `construct` (a `new S3Client(...)`) without the AWS SDK's
 * NodeVersionSupportWarning. From 3.9xx on, the SDK's client constructor
 * (getRuntimeConfig, through @aws-sdk/core's emitWarningIfUnsupportedVersion)
 * prints a six-line warning on Node.js below 22 that its future versions will
 * need Node 22. Tidemark's engines no longer include 20 (so on the lines it
 * promises this does nothing), but it ran there with the SDK version it tests,
 * and for a user still on 20 the warning would come in every program and
 * every `tidemark` run.
 *
 * The SDK's own switch is the environment variable above, read only by that
 * function. It is set only for the constructor's duration and restored after,
 * so no other warning is hidden and the environment the program sees does not
 * change; a value the user set is kept. The SDK remembers that it has dealt
 * with the warning (a flag of @aws-sdk/core), so the user's own clients, which
 * share that copy of the SDK, do not print it later either: it is the same
 * warning, once per process.
 */
export function quietSdk<T>(construct: () => T): T {
  const before = process.env[SWITCH]
  if (before !== undefined) return construct()
  process.env[SWITCH] = 'true'
  try {
    return construct()
  } finally {
    delete process.env[SWITCH]
  }
}
