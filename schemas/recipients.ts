import { Type } from '@sinclair/typebox'

export const UnlockBody = Type.Object({
  email: Type.String({ minLength: 1, maxLength: 1024, description: 'The recipient whose lock to clear; every spelling of its mailbox is the same one.', examples: ['ada@example.com'] })
}, { $id: 'UnlockRequest', additionalProperties: false })

export const UnlockReply = Type.Object({
  success: Type.Literal(true),
  message: Type.String(),
  data: Type.Object({
    cleared: Type.Boolean({ description: 'Whether the mailbox had a lock or a run of wrong guesses to forget.' })
  })
}, { $id: 'UnlockReply' })
