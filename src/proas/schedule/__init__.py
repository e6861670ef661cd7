"""``proas schedule``: make and verify the fixed task sets from the command line
(``proas.schedule.cli``). The task sets themselves, which the trainer reads, are the ground
floor's ``proas.tasksets``."""
