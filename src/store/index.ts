/** The store layer's door for the connectors: its public API and what a runtime needs besides. */
export * from './public.js'
export { decodeFailed } from './codec.js'
export { isJsonCodec } from './codec.js'
export { countState, decodeStateValue, scanState, type ScannedEntry } from './state-scan.js'
export { LINEAGE_ID, LINEAGE_METADATA, readLineage, type LineageRecord } from './lineage.js'
export { versionHeader } from './versioning.js'
