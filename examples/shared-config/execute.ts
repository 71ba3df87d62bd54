// What each command does to a SharedConfig, and the line it prints.
import { HELP, type Command } from './commands.js'
import type { SharedConfig } from './shared-config.js'

const show = (value: string | undefined): string => (value === undefined ? 'not set' : value)

export async function execute(config: SharedConfig, command: Command): Promise<string[]> {
  switch (command.name) {
    case 'GET_ALL': {
      const entries = [...config.getProperties()].map(([k, v]) => `${k}=${v}`)
      return [`{${entries.join(', ')}}`]
    }
    case 'GET':
      return [`${command.key}: ${show(config.getProperty(command.key))}`]
    case 'PUT': {
      const old = await config.putProperty(command.key, command.value)
      return [`${command.key}=${command.value} (was ${show(old)})`]
    }
    case 'PUT_IF_ABSENT': {
      const existing = await config.putPropertyIfAbsent(command.key, command.value)
      return [existing === undefined ? `${command.key}=${command.value} (was not set)` : `${command.key} is already ${existing}; unchanged`]
    }
    case 'REMOVE': {
      const args = command.currentValue === undefined ? ([] as const) : ([command.currentValue] as const)
      const removed = await config.removeProperty(command.key, ...args)
      if (removed !== undefined) return [`removed ${command.key} (was ${removed})`]
      return [unchanged(config, command.key, command.currentValue)]
    }
    case 'REPLACE': {
      const args = command.currentValue === undefined ? ([] as const) : ([command.currentValue] as const)
      const replaced = await config.replaceProperty(command.key, command.newValue, ...args)
      if (replaced !== undefined) return [`${command.key}=${command.newValue} (was ${replaced})`]
      return [unchanged(config, command.key, command.currentValue)]
    }
    case 'CLEAR':
      await config.clear()
      return ['cleared']
    case 'REFRESH':
      await config.synchronize()
      return [`refreshed (revision ${config.revision})`]
    case 'HELP':
      return HELP
    case 'QUIT':
      return ['bye']
  }
}

/** Why a conditional REMOVE or REPLACE did nothing, judged on the state it was decided on. */
function unchanged(config: SharedConfig, key: string, expected: string | undefined): string {
  const current = config.getProperty(key)
  if (current === undefined) return `${key} is not set; unchanged`
  return `${key} is ${current}, not ${expected}; unchanged`
}
