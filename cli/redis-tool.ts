import { ConfigError, parseRedisToolConfig } from '../lib/config/from-env.js'
import { CommandError, type Io } from './program.js'

type ToolConfig = ReturnType<typeof parseRedisToolConfig>

/** The Redis a command works on, read as the service reads it; `withoutRedis` says why the command needs one. */
export function redisForTool (env: Io['env'], withoutRedis: string): ToolConfig & { redis: NonNullable<ToolConfig['redis']> } {
  let config: ToolConfig
  try {
    config = parseRedisToolConfig(env)
  } catch (error) {
    if (error instanceof ConfigError) throw new CommandError(error.message)
    throw error
  }
  const { redis } = config
  if (redis === null) throw new CommandError(withoutRedis)
  return { ...config, redis }
}

/** What a command reports when the Redis it works on does not answer. */
export function redisFailure (config: ToolConfig, error: unknown): CommandError {
  return new CommandError(`Redis (${config.redisVariable ?? 'REDIS_URL'}) did not answer: ${(error as Error).message}`)
}
